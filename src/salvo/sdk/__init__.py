"""What a team imports: the client, a player's view, strategies and bots, following a tournament.

Speaks the wire only (the public paths: salvo.sdk.client, salvo.sdk.view, salvo.sdk.strategy, salvo.sdk.bots)."""
