"""The render tier: templating and tokenization in, detokenization and parsing out."""
