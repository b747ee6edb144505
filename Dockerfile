FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY protocol protocol
COPY quotas quotas
COPY allocator allocator
COPY proxy proxy
COPY pipeline pipeline
COPY examples examples
RUN pip install --no-cache-dir .
EXPOSE 9092 9100
ENTRYPOINT ["kafka-quota-proxy"]
