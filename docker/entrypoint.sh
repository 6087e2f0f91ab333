#!/bin/sh
# The salvo image's entrypoint. Started as root (the compose file's way),
# it makes sure the organiser's data directory belongs to uid:gid 1883:1883
# (a data/ made by `mkdir`, or by Docker itself for a bind mount, belongs to
# root; the eclipse-mosquitto image reads data/broker/ as 1883 too), then
# runs salvo as 1883 with no other privilege. Started as another user
# (docker run --user), it changes nothing and runs salvo as that user.
set -eu
if [ "$(id -u)" = 0 ]; then
    mkdir -p data
    # Only what is not 1883's yet: a no-op on every later start.
    find data \( ! -user 1883 -o ! -group 1883 \) -exec chown -h 1883:1883 {} +
    exec setpriv --reuid=1883 --regid=1883 --clear-groups -- salvo "$@"
fi
exec salvo "$@"
