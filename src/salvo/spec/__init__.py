"""What docs/protocol.md defines: rules, topic names, error codes, JSON, payloads, wire models, keys.

No state and no IO; everything above speaks through it."""
