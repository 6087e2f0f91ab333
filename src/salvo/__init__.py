"""salvo: the authoritative referee for multiplayer Battleship: Salvo over MQTT."""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    # The installed distribution's version, the one source (pyproject.toml):
    # salvo, or the team's install salvo-sdk (sdk/pyproject.toml reads the
    # same line); read on first use so that importing salvo stays cheap.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("salvo")
        except PackageNotFoundError:
            return version("salvo-sdk")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
