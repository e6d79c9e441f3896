"""advisor: measure collocated vs disaggregated serving and recommend a placement."""
