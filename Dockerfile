# One image for every stormpy daemon (ZooKeeper via `stormpy dev-zookeeper`, Nimbus, supervisors,
# UI); the worker processes run in the supervisor's container, forked by it.
#
#   docker build -t stormpy:latest .                              Java 17 + the spark and redis extras
#   docker build --build-arg WITH_SPARK=0 -t stormpy:nojvm .     no JVM, no PySpark: supervisors whose
#                                                                 topologies need no Spark (much smaller)
#
# tini is PID 1: it forwards SIGTERM to the daemon and reaps what the daemon does not (workers
# the supervisor adopted after a restart). HEALTHCHECK asks the daemon running in the container on
# its own port (python -m stormpy.healthcheck: Nimbus Thrift, the UI, ZooKeeper ruok, the log viewer).
# `stormpy dev-zookeeper` needs Java and ZooKeeper's jars: run it from the default image.
FROM python:3.11-slim-bookworm

ARG WITH_SPARK=1

RUN apt-get update \
 && apt-get install -y --no-install-recommends tini procps \
 && if [ "$WITH_SPARK" = 1 ]; then apt-get install -y --no-install-recommends openjdk-17-jre-headless; fi \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/stormpy
COPY pyproject.toml setup.py README.md ./
COPY build_backend ./build_backend
COPY idl ./idl
COPY stormpy ./stormpy
COPY examples ./examples
RUN if [ "$WITH_SPARK" = 1 ]; then pip install --no-cache-dir '.[spark,redis]'; \
    else pip install --no-cache-dir '.[redis]'; fi

RUN mkdir -p /var/stormpy /var/log/stormpy
COPY docker/storm.yaml /etc/stormpy/storm.yaml
EXPOSE 2181 6627 8080 8000 6700 6701 6702 6703
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 CMD ["python", "-m", "stormpy.healthcheck"]
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["stormpy", "--help"]
