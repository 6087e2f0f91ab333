"""Test and measurement tools: the conformance suite, chaos runs, load, benches, local brokers,
the demo. Only the CLI (and the public salvo.tools.conformance) import them."""
