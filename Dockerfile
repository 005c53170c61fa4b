# pykraft container image: one image runs a controller or a broker; the `spark` stage adds Java and
# PySpark for the compose file's `spark` service.
#
#   docker build --target runtime -t pykraft:local .          # controllers and brokers
#   docker build --target spark   -t pykraft-spark:local .    # + Java + PySpark (the spark service)
#   docker build --target prometheus -t pykraft-prometheus:local .  # Debian's prometheus (a compose profile)
#
# Where no registry can be pulled from, build on a local Debian base instead of python:3.11-slim:
#   scripts/docker-base-image.sh && docker build --network host --build-arg BASE=pykraft-base:local ...
# No C compiler in the images: the Spark reader's compiled decoder (spark/_decode.pyx, built by
# setup.py) is left out (PYKRAFT_OPTIONAL_EXTENSIONS=1) and the pure-Python decoder runs, as the build
# log says. Controllers and brokers never decode records; the spark service is a demo query, not a
# benchmark — and gcc with the Python headers would add ~200 MB to a minimal base.
# The process is chosen by the command (`controller` or `broker`) and configured from PYKRAFT_*
# environment variables (see docker/entrypoint.sh); the data lives in the volume /var/lib/pykraft/data.
ARG BASE=python:3.11-slim

FROM ${BASE} AS deps
# pip trusts the system CA bundle (a registry proxy's certificate may only be there).
ARG PIP_CERT=/etc/ssl/certs/ca-certificates.crt
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/pykraft/venv/bin:$PATH
RUN python3 -m venv /opt/pykraft/venv \
 && useradd --uid 10001 --user-group --home-dir /var/lib/pykraft --create-home pykraft \
 && mkdir -p /var/lib/pykraft/data \
 && chown -R pykraft:pykraft /var/lib/pykraft
WORKDIR /opt/pykraft/src
# Dependencies first: this layer is rebuilt only when pyproject.toml changes. PySpark (450 MB) is
# left to the spark stage; controllers and brokers never import it.
COPY pyproject.toml setup.py README.md ./
RUN python -c "import tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; \
open('/tmp/requirements.txt', 'w').write('\n'.join(d for d in deps if not d.startswith('pyspark')))" \
 && pip install --no-cache-dir -r /tmp/requirements.txt

# Controllers and brokers: the code on top of the dependency layer (source edits rebuild only this).
FROM deps AS runtime
COPY proto ./proto
COPY raft ./raft
COPY metadata ./metadata
COPY storage ./storage
COPY broker ./broker
COPY pykraft ./pykraft
COPY spark ./spark
RUN PYKRAFT_OPTIONAL_EXTENSIONS=1 pip install --no-cache-dir --no-deps . && rm -rf build *.egg-info \
 && python -c "import glob, sysconfig; print('pykraft: the Spark reader decodes with the', \
'compiled decoder' if glob.glob(sysconfig.get_paths()['platlib'] + '/spark/_decode*.so') else \
'pure-Python decoder (no C compiler in this image)')"
COPY docker/entrypoint.sh /usr/local/bin/pykraft-entrypoint
USER pykraft
WORKDIR /var/lib/pykraft
VOLUME ["/var/lib/pykraft/data"]
EXPOSE 9092 9093
# grpc.health.v1 on this node's own port (PYKRAFT_LISTEN, default per role in the entrypoint).
HEALTHCHECK --interval=2s --timeout=3s --start-period=30s --retries=5 \
  CMD ["pykraft-entrypoint", "healthcheck"]
ENTRYPOINT ["pykraft-entrypoint"]
CMD ["controller"]

# The spark service: Java and PySpark below the code, so source edits do not reinstall them.
FROM deps AS spark
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends default-jre-headless \
 && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir "$(python -c "import tomllib; print(next(d for d in tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'] if d.startswith('pyspark')))")"
COPY proto ./proto
COPY raft ./raft
COPY metadata ./metadata
COPY storage ./storage
COPY broker ./broker
COPY pykraft ./pykraft
COPY spark ./spark
RUN PYKRAFT_OPTIONAL_EXTENSIONS=1 pip install --no-cache-dir --no-deps . && rm -rf build *.egg-info \
 && python -c "import glob, sysconfig; print('pykraft: the Spark reader decodes with the', \
'compiled decoder' if glob.glob(sysconfig.get_paths()['platlib'] + '/spark/_decode*.so') else \
'pure-Python decoder (no C compiler in this image)')"
COPY docker/spark_query.py /opt/pykraft/spark_query.py
ENV SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON=/opt/pykraft/venv/bin/python
USER pykraft
WORKDIR /var/lib/pykraft
ENTRYPOINT ["python", "/opt/pykraft/spark_query.py"]
CMD []

# The prometheus service (compose profile `prometheus`): Debian's prometheus package with pykraft's scrape
# configuration and alert rules; no registry image is needed.
FROM ${BASE} AS prometheus
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /var/lib/pykraft-prometheus && chown prometheus:prometheus /var/lib/pykraft-prometheus
COPY docker/prometheus/ /etc/pykraft-prometheus/
USER prometheus
VOLUME ["/var/lib/pykraft-prometheus"]
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus", "--config.file=/etc/pykraft-prometheus/prometheus.yml", \
            "--storage.tsdb.path=/var/lib/pykraft-prometheus", "--web.listen-address=0.0.0.0:9090"]
