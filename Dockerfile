# The salvo referee (and tournament director, bots, projector page, the
# organiser's tools) as a container. Build it before the night, where PyPI
# is reachable (docker compose build): docs/tournament-night.md.
FROM python:3.11-slim

# Every salvo process runs as one fixed, unprivileged uid:gid, 1883:1883:
# the mosquitto user of the eclipse-mosquitto image. Everything in ./data
# then belongs to the uid that reads it, broker and referee alike, and every
# secret in it can be 0600. The entrypoint gives data/ to 1883 when it is
# not yet (it starts as root for that alone, then drops to 1883).
RUN groupadd --system --gid 1883 salvo \
    && useradd --system --uid 1883 --gid 1883 --no-create-home --home-dir /srv/salvo --shell /usr/sbin/nologin salvo

WORKDIR /app
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir ".[organiser]"
COPY docker/entrypoint.sh /usr/local/bin/salvo-entrypoint

# Log lines reach `docker compose logs` at once.
ENV PYTHONUNBUFFERED=1
# The working directory is laid out like the repository's top: docker-compose.yml
# mounts ./data at /srv/salvo/data, so every path in the guide (data/tls/ca.crt,
# data/broker/passwd, data/teams.json, ...) means the same file in the
# container as on the host, and so do the paths salvo prints (a team card's CA file).
WORKDIR /srv/salvo
ENTRYPOINT ["salvo-entrypoint"]
CMD ["--help"]
