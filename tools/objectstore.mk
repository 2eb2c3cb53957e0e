# The local S3-compatible object store (`kappa objectstore`, tests/integration/test_objectstore.py):
# Versity's versitygw (S3 gateway over a POSIX folder), no containers. Included by the Makefile after
# tools/k8s.mk (uses its GO, K8S_TOOLS, K8S_TOOLBIN). Built once into build/tools/bin behind a stamp
# that names the version (tools/versions.env), so a warm run does nothing; modules and build cache are
# Go's own (~/go/pkg/mod, ~/.cache/go-build), shared with the other Go tools.
#
#   make objectstore-tools   build versitygw (cold: 4.5-5.5 min on 2 busy cores; then instant)
#
# Why versitygw: its module has no replace directives (plain `go install`, no wrapper module), and it
# builds with less than half MinIO's CPU time (140 s vs 306 s cold; 81 required modules vs 261); both
# honour `If-None-Match: *` on PutObject (412 when the key exists), which Delta's conditional commits
# need. See the README, "Object store".

OBJECTSTORE_GO_ENV := GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN=$(GO_BIN_CACHE)

.PHONY: objectstore-tools

# -X sets what `versitygw --version` prints, as versitygw's own Makefile does.
$(K8S_TOOLS)/.versitygw-$(VERSITYGW_VERSION):
	@command -v $(GO) >/dev/null || { echo "Go is required to build versitygw (go not found)"; exit 1; }
	mkdir -p $(K8S_TOOLBIN) $(GO_BIN_CACHE)
	$(OBJECTSTORE_GO_ENV) $(GO) install -ldflags "-X=main.Version=$(VERSITYGW_VERSION)" \
		github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)
	cp -p $(GO_BIN_CACHE)/versitygw $(K8S_TOOLBIN)/
	touch $@

objectstore-tools: $(K8S_TOOLS)/.versitygw-$(VERSITYGW_VERSION)
