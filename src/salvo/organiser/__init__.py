"""The organiser's tools: teams (logins, ACL, cards), TLS, journal tools, the tournament, the console."""
