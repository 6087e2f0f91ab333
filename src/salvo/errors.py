"""Public path of the protocol's error codes: ``from salvo.errors import Code`` (docs/sdk.md).

They live in :mod:`salvo.spec.errors`; this module only names them for teams.
Code inside salvo imports the real home.
"""

from salvo.spec.errors import Code, Illegal, Malformed, Rejection

__all__ = ["Code", "Illegal", "Malformed", "Rejection"]
