"""One arena without network (raw messages in, effects out) and its journal."""
