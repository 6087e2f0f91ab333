"""salvo: the authoritative referee for multiplayer Battleship: Salvo over MQTT."""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    # The installed distribution's version, the one source (pyproject.toml);
    # read on first use so that importing salvo stays cheap.
    if name == "__version__":
        from importlib.metadata import version

        return version("salvo")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
