"""The spectators' side: the audience feed, the projector and replay pages, the web server."""
