# Build: make image. The bpf objects are committed (bpf2go output), so no clang is needed here.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/egressd/egressd/internal/version.Version=${VERSION}" \
    -o /out/ ./cmd/egressd ./cmd/egressctl ./cmd/egressd-cni ./cmd/egressd-cni-router

FROM gcr.io/distroless/static-debian12
COPY --from=build /out/egressd /out/egressctl /out/egressd-cni /out/egressd-cni-router /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/egressd"]
