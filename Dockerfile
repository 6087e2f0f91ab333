# The salvo referee (and tournament director, bots, projector page) as a
# container. Build it before the night, where PyPI is reachable
# (docker compose build): docs/tournament-night.md.
FROM python:3.11-slim

# Every salvo process runs as one fixed, unprivileged uid:gid, 1883:1883: the
# mosquitto user of the eclipse-mosquitto image. Everything in ./data (the
# password file, ACL, TLS key, journals, tournament state) then belongs to the
# uid that reads it, broker and referee alike: no file needs to be
# world-readable (mosquitto 2.0.16+ warns about world-readable files and
# files of another owner, and announces refusing them). The host's ./data
# must belong to 1883:1883: sudo chown -R 1883:1883 data
RUN groupadd --system --gid 1883 salvo \
    && useradd --system --uid 1883 --gid 1883 --no-create-home --home-dir /data --shell /usr/sbin/nologin salvo

WORKDIR /app
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir ".[organiser]" && mkdir -p /data && chown 1883:1883 /data

# Log lines reach `docker compose logs` at once.
ENV PYTHONUNBUFFERED=1
USER 1883:1883
# State (journal, referee key, tournament decisions) lives in /data, which
# docker-compose.yml bind-mounts from ./data (no VOLUME: no anonymous volumes).
WORKDIR /data
ENTRYPOINT ["salvo"]
CMD ["referee", "--help"]
