"""salvo: the authoritative referee for multiplayer Battleship: Salvo over MQTT."""

__version__ = "0.1.0"
