# The salvo referee (and tournament director, bots) as a container.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir ".[organiser]" && mkdir -p /data
# State (journal, referee key, tournament decisions) lives on the volume.
WORKDIR /data
VOLUME ["/data"]
ENTRYPOINT ["salvo"]
CMD ["referee", "--help"]
