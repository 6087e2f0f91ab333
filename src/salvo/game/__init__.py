"""The sans-IO game: events in, publishes out; every rule of play. No MQTT, clock, thread or file."""
