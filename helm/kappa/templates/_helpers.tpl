{{/* Chart name. */}}
{{- define "kappa.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "kappa.labels" -}}
app.kubernetes.io/name: {{ include "kappa.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: kappa
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Strimzi's cluster label, which KafkaTopic and KafkaUser need. */}}
{{- define "kappa.strimziLabels" -}}
{{ include "kappa.labels" . }}
strimzi.io/cluster: {{ .Values.kafka.name }}
{{- end -}}

{{/* The Kappa image reference: `repository@digest` when image.digest is set (what runs cannot
change when a tag moves), else `repository:tag`. Pods, the runner's ConfigMap and the admission
policies all use this one reference. */}}
{{- define "kappa.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The catalog generated from assets/ (topics and streaming assets that read Kafka). */}}
{{- define "kappa.catalog" -}}
{{- $c := .Files.Get "catalog.yaml" | fromYaml -}}
{{- if or (not $c) (not $c.topics) -}}
{{- fail "catalog.yaml is missing or declares no topics: run `make helm-catalog`" -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}

{{/* Bootstrap address of the client listener inside the cluster. */}}
{{- define "kappa.bootstrap" -}}
{{- printf "%s-kafka-bootstrap.%s.svc:%v" .Values.kafka.name .Release.Namespace .Values.kafka.listener.port -}}
{{- end -}}

{{/* One NetworkPolicy egress rule: `to` the given peers on the given TCP ports. The peers are
required (`name` is the value's path, for the message): a rule without `to` would open the ports
to every address, so that takes saying so, e.g. `[{ipBlock: {cidr: 0.0.0.0/0}}]` for AWS S3,
which has no fixed addresses. values.schema.json holds the same rule (minItems 1). */}}
{{- define "kappa.egressRule" -}}
{{- if not .peers -}}
{{- fail (printf "%s is required: the NetworkPolicy peers (`to:` entries, e.g. [{ipBlock: {cidr: 10.0.5.0/24}}]) of what it names; without them its ports would be open to any address (write [{ipBlock: {cidr: 0.0.0.0/0}}] to mean that)" .name) -}}
{{- end -}}
- to:
    {{- toYaml .peers | nindent 4 }}
  ports:
    {{- range .ports }}
    - protocol: TCP
      port: {{ . }}
    {{- end }}
{{- end -}}

{{/* Mandatory values and the security invariants the schema cannot express. */}}
{{- define "kappa.validate" -}}
{{- if not .Values.objectStore.existingSecret -}}
{{- fail "objectStore.existingSecret is required: the name of an existing Secret with the object-store keys (credentials never go into values)" -}}
{{- end -}}
{{- if and .Values.serve.enabled (not .Values.serve.objectStore.existingSecret) -}}
{{- fail "serve.objectStore.existingSecret is required: the SQL endpoint's own object-store keys (read the warehouse, write only <warehouse>/_dbt/), never the read-write ones" -}}
{{- end -}}
{{- if and .Values.serve.enabled (eq .Values.serve.objectStore.existingSecret .Values.objectStore.existingSecret) -}}
{{- fail "serve.objectStore.existingSecret must not be objectStore.existingSecret: the SQL endpoint gets an identity that cannot write the tables, the checkpoints or the registry" -}}
{{- end -}}
{{- range list .Values.objectStore.warehouse .Values.objectStore.checkpoints -}}
{{- if not (hasPrefix "s3a://" .) -}}
{{- fail (printf "objectStore.warehouse and objectStore.checkpoints must be s3a:// URIs, got %q" .) -}}
{{- end -}}
{{- end -}}
{{- $controllers := 0 -}}{{- $brokers := 0 -}}
{{- range .Values.kafka.nodePools -}}
{{- if has "controller" .roles }}{{ $controllers = add1 $controllers }}{{ end -}}
{{- if has "broker" .roles }}{{ $brokers = add1 $brokers }}{{ end -}}
{{- end -}}
{{- if and .Values.serve.enabled .Values.networkPolicy.enabled (empty .Values.networkPolicy.serveClientPodLabels) -}}
{{- fail "networkPolicy.serveClientPodLabels must name at least one label: an empty selector would open the SQL endpoint to every pod of the namespace" -}}
{{- end -}}
{{- if and .Values.kafka.externalListener.enabled (eq .Values.kafka.externalListener.type "loadbalancer") (empty .Values.kafka.externalListener.sourceRanges) -}}
{{- fail "kafka.externalListener.sourceRanges must name the client networks (CIDRs) of a loadbalancer listener: without them the load balancer admits the whole internet" -}}
{{- end -}}
{{- if and .Values.connect.enabled (not .Values.connect.build.enabled) (empty .Values.connect.image) -}}
{{- fail "connect.image is required when connect.build.enabled is false: an image with the Debezium PostgreSQL plugin" -}}
{{- end -}}
{{- if or (eq $controllers 0) (eq $brokers 0) -}}
{{- fail "kafka.nodePools: KRaft needs at least one pool with the controller role and one with the broker role" -}}
{{- end -}}
{{- end -}}
