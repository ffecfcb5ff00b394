# One image for every stormpy daemon (ZooKeeper via `stormpy dev-zookeeper`, Nimbus, supervisors,
# UI). Java is needed by ZooKeeper and PySpark; the worker processes run in the supervisor's
# container, forked by it.
FROM python:3.11-slim

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/stormpy
COPY pyproject.toml README.md ./
COPY idl ./idl
COPY stormpy ./stormpy
COPY examples ./examples
RUN pip install --no-cache-dir .

RUN mkdir -p /var/stormpy /var/log/stormpy
COPY docker/storm.yaml /etc/stormpy/storm.yaml
EXPOSE 2181 6627 8080 6700 6701 6702 6703
CMD ["stormpy", "--help"]
