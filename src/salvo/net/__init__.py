"""Generic transport: broker URLs and paho clients, the event loop, one connection on it, a recorder.

Knows no game."""
