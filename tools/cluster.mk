# The local Kubernetes control plane for tests: real kube-apiserver (on kine/SQLite), kube-controller-
# manager, kube-scheduler, kwok nodes and the real Spark operator controller, no containers. Included
# by the Makefile after tools/k8s.mk (uses its GO, GO_ENV, K8S_TOOLS). Built once into build/tools/bin
# behind stamp files that name the version; versions: tools/versions.env and helm/upstream.env.
#
#   make cluster-tools   build the binaries (cold: ~15 min on 2 busy cores; then seconds)
#   make cluster-up      kappa cluster start  (state under .kappa/cluster, kubeconfig .kappa/cluster/kubeconfig)
#   make cluster-up NODE=real  the same with a real node: containerd and a kubelet (make node-tools)
#   make cluster-down    kappa cluster stop

CLUSTER_GO_ENV := GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=0

.PHONY: cluster-tools cluster-up cluster-down cluster-status

# The version the binaries report (/version, `kubectl version`), set as Kubernetes' own build does
# (hack/lib/version.sh): without it they say v0.0.0-master and Helm refuses the kappa chart's
# kubeVersion (>=1.33.0-0).
K8S_MINOR := $(word 2,$(subst ., ,$(KUBERNETES_VERSION)))
K8S_VERSION_LDFLAGS := $(foreach pkg,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
	-X $(pkg).gitVersion=$(KUBERNETES_VERSION) -X $(pkg).gitMajor=1 -X $(pkg).gitMinor=$(K8S_MINOR) \
	-X $(pkg).gitTreeState=clean)

# k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces the staging modules with local
# paths): tools/go/kubernetes is a wrapper module that pins them to the published v0.x releases.
$(K8S_TOOLS)/.kubernetes-$(KUBERNETES_VERSION): tools/go/kubernetes/go.mod tools/go/kubernetes/go.sum
	@command -v $(GO) >/dev/null || { echo "Go is required to build kube-apiserver (go not found)"; exit 1; }
	@grep -q 'k8s.io/kubernetes $(KUBERNETES_VERSION)$$' tools/go/kubernetes/go.mod || \
		{ echo "tools/go/kubernetes/go.mod does not require k8s.io/kubernetes $(KUBERNETES_VERSION) (tools/versions.env)"; exit 1; }
	mkdir -p $(K8S_TOOLBIN) $(GO_BIN_CACHE)
	cd tools/go/kubernetes && $(CLUSTER_GO_ENV) GOBIN=$(GO_BIN_CACHE) $(GO) install -ldflags '$(K8S_VERSION_LDFLAGS)' ./cmd/...
	cd $(GO_BIN_CACHE) && cp -p $(notdir $(wildcard tools/go/kubernetes/cmd/*)) $(K8S_TOOLBIN)/
	touch $@

$(K8S_TOOLS)/.kine-$(KINE_VERSION):
	mkdir -p $(K8S_TOOLBIN) $(GO_BIN_CACHE)
	$(CLUSTER_GO_ENV) GOBIN=$(GO_BIN_CACHE) $(GO) install github.com/k3s-io/kine@$(KINE_VERSION)
	cp -p $(GO_BIN_CACHE)/kine $(K8S_TOOLBIN)/
	touch $@

# kwok does nothing without Stages: its module's "fast" node and pod stages and the node heartbeat
# (a Lease, so the node lifecycle controller keeps the node Ready) are copied next to it.
KWOK_STAGES := node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
	pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml
$(K8S_TOOLS)/.kwok-$(KWOK_VERSION):
	mkdir -p $(K8S_TOOLBIN) $(GO_BIN_CACHE)
	$(CLUSTER_GO_ENV) GOBIN=$(GO_BIN_CACHE) $(GO) install sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION)
	cp -p $(GO_BIN_CACHE)/kwok $(K8S_TOOLBIN)/
	dir=$$($(CLUSTER_GO_ENV) $(GO) mod download -json sigs.k8s.io/kwok@$(KWOK_VERSION) \
		| python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])') && \
	rm -rf $(K8S_TOOLS)/kwok-stages && mkdir -p $(K8S_TOOLS)/kwok-stages && \
	for f in $(KWOK_STAGES); do cp $$dir/kustomize/stage/$$f $(K8S_TOOLS)/kwok-stages/; done && chmod u+w $(K8S_TOOLS)/kwok-stages/*
	touch $@

# The operator's `controller` command; its module's CRDs and chart are copied next to it (tools/deploy.sh
# installs that chart when the chart repository cannot be reached).
$(K8S_TOOLS)/.spark-operator-v$(SPARK_OPERATOR_VERSION): tools/go/spark-operator/go.mod tools/go/spark-operator/go.sum
	@grep -qE 'github.com/kubeflow/spark-operator/v2 v$(SPARK_OPERATOR_VERSION)( // indirect)?$$' tools/go/spark-operator/go.mod || \
		{ echo "tools/go/spark-operator/go.mod does not require spark-operator v$(SPARK_OPERATOR_VERSION) (helm/upstream.env)"; exit 1; }
	mkdir -p $(K8S_TOOLBIN) $(GO_BIN_CACHE)
	cd tools/go/spark-operator && $(CLUSTER_GO_ENV) $(GO) build -o $(GO_BIN_CACHE)/spark-operator github.com/kubeflow/spark-operator/v2/cmd/operator
	cp -p $(GO_BIN_CACHE)/spark-operator $(K8S_TOOLBIN)/
	dir=$$(cd tools/go/spark-operator && $(CLUSTER_GO_ENV) $(GO) list -m -f '{{.Dir}}' github.com/kubeflow/spark-operator/v2) && \
	rm -rf $(SPARK_OP_DIR)/crds $(SPARK_OP_DIR)/chart && mkdir -p $(SPARK_OP_DIR)/crds && \
	cp $$dir/config/crd/bases/*.yaml $(SPARK_OP_DIR)/crds/ && \
	cp -r $$dir/charts/spark-operator-chart $(SPARK_OP_DIR)/chart && chmod -R u+w $(SPARK_OP_DIR)/chart $(SPARK_OP_DIR)/crds
	touch $@

cluster-tools: $(K8S_TOOLS)/.kubernetes-$(KUBERNETES_VERSION) $(K8S_TOOLS)/.kine-$(KINE_VERSION) \
	$(K8S_TOOLS)/.kwok-$(KWOK_VERSION) $(K8S_TOOLS)/.spark-operator-v$(SPARK_OPERATOR_VERSION) \
	$(STRIMZI_DIR)/.crds $(STRIMZI_DIR)/.crds-connect $(K8S_TOOLS)/.helm-$(HELM_VERSION)

# The real node (`make cluster-up NODE=real`, kappa.services.node): Debian's containerd (runc and the
# CNI plugins come with it), the kubelet, kube-proxy and the pod sandbox's pause binary built from the
# wrapper module's ./node (not ./cmd: `make test` needs none of them), CoreDNS from its own module,
# and the pause image saved as an archive
# that `kappa cluster start` imports into containerd. The Kappa image itself is `make image`'s.
PAUSE_IMAGE := localhost/kappa/pause:$(KUBERNETES_VERSION)
NODE_TOOLS := $(K8S_TOOLS)/node
.PHONY: node-tools node-packages
node-packages:
	@command -v containerd >/dev/null && command -v ctr >/dev/null && [ -x /usr/lib/cni/bridge ] && command -v ipset >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containerd containernetworking-plugins ipset; }

$(K8S_TOOLS)/.kubelet-$(KUBERNETES_VERSION): tools/go/kubernetes/go.mod tools/go/kubernetes/go.sum $(wildcard tools/go/kubernetes/node/*/*.go)
	mkdir -p $(K8S_TOOLBIN) $(GO_BIN_CACHE)
	cd tools/go/kubernetes && $(CLUSTER_GO_ENV) GOBIN=$(GO_BIN_CACHE) $(GO) install -ldflags '$(K8S_VERSION_LDFLAGS)' ./node/...
	cd $(GO_BIN_CACHE) && cp -p $(notdir $(wildcard tools/go/kubernetes/node/*)) $(K8S_TOOLBIN)/
	touch $@

$(NODE_TOOLS)/pause.tar: $(K8S_TOOLS)/.kubelet-$(KUBERNETES_VERSION) tools/node/pause.Containerfile
	rm -rf $(NODE_TOOLS)/context && mkdir -p $(NODE_TOOLS)/context && cp -p $(K8S_TOOLBIN)/pause $(NODE_TOOLS)/context/
	tools/container/podman.sh build -q -t $(PAUSE_IMAGE) -f tools/node/pause.Containerfile $(NODE_TOOLS)/context
	rm -f $@ && tools/container/podman.sh save -o $@ $(PAUSE_IMAGE)

$(K8S_TOOLS)/.coredns-$(COREDNS_VERSION):
	mkdir -p $(K8S_TOOLBIN) $(GO_BIN_CACHE)
	$(CLUSTER_GO_ENV) GOBIN=$(GO_BIN_CACHE) $(GO) install github.com/coredns/coredns@$(COREDNS_VERSION)
	cp -p $(GO_BIN_CACHE)/coredns $(K8S_TOOLBIN)/
	touch $@

# kube-router's NetworkPolicy firewall, from its wrapper module (go.mod pins it and says which
# dependencies it raises and why); it runs Debian's ipset and iptables (node-packages). -X sets the
# version `kube-router --version` prints, as upstream's Makefile does.
$(K8S_TOOLS)/.kube-router-$(KUBE_ROUTER_VERSION): tools/go/kube-router/go.mod tools/go/kube-router/go.sum tools/go/kube-router/main.go
	@command -v $(GO) >/dev/null || { echo "Go is required to build kube-router (go not found)"; exit 1; }
	@grep -q 'github.com/cloudnativelabs/kube-router/v2 $(KUBE_ROUTER_VERSION)$$' tools/go/kube-router/go.mod || \
		{ echo "tools/go/kube-router/go.mod does not require kube-router $(KUBE_ROUTER_VERSION) (tools/versions.env)"; exit 1; }
	mkdir -p $(K8S_TOOLBIN) $(GO_BIN_CACHE)
	cd tools/go/kube-router && $(CLUSTER_GO_ENV) $(GO) build -trimpath \
		-ldflags '-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$(KUBE_ROUTER_VERSION)' \
		-o $(GO_BIN_CACHE)/kube-router .
	cp -p $(GO_BIN_CACHE)/kube-router $(K8S_TOOLBIN)/
	touch $@

node-tools: cluster-tools node-packages $(NODE_TOOLS)/pause.tar $(K8S_TOOLS)/.coredns-$(COREDNS_VERSION) \
	$(K8S_TOOLS)/.kube-router-$(KUBE_ROUTER_VERSION)

cluster-up: cluster-tools $(if $(filter real,$(NODE)),node-tools) | $(VENV)/.installed
	KAPPA_CLUSTER_NODE=$(or $(NODE),kwok) $(BIN)/kappa cluster start

cluster-down: | $(VENV)/.installed
	$(BIN)/kappa cluster stop

cluster-status: | $(VENV)/.installed
	$(BIN)/kappa cluster status
