"""The verbs that measure, check or serve one placement: `advisor bench`, `probe` and
`serve`, each on a deployment at a URL or on an engine it starts here (advisor.engines)."""
