{{/*
Chart name, used in the app.kubernetes.io/name label.
*/}}
{{- define "tollgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Resource names. Unlike the usual "<release>-<chart>", the default is the release name alone,
so a release called "ratelimit" gives the Service "ratelimit" and callers (Istio's EnvoyFilter,
Envoy's cluster) reach ratelimit.<namespace>.svc.cluster.local:8081 as with envoyproxy/ratelimit.
fullnameOverride wins.
*/}}
{{- define "tollgate.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tollgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tollgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tollgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
app.kubernetes.io/version: the image tag (else appVersion), made a valid label value (at most
63 characters of [-A-Za-z0-9_.], alphanumeric at both ends).
*/}}
{{- define "tollgate.version" -}}
{{- $v := .Values.image.tag | default .Chart.AppVersion | toString }}
{{- $v = regexReplaceAll "[^-A-Za-z0-9_.]" $v "_" | trunc 63 }}
{{- regexReplaceAll "^[^A-Za-z0-9]+|[^A-Za-z0-9]+$" $v "" }}
{{- end }}

{{- define "tollgate.labels" -}}
helm.sh/chart: {{ include "tollgate.chart" . }}
{{ include "tollgate.selectorLabels" . }}
{{- with include "tollgate.version" . }}
app.kubernetes.io/version: {{ . | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Labels of the `helm test` pod: deliberately NOT the selector labels, so neither the Service,
the PodDisruptionBudget nor the NetworkPolicy's podSelector ever pick the test pod.
*/}}
{{- define "tollgate.testLabels" -}}
helm.sh/chart: {{ include "tollgate.chart" . }}
app.kubernetes.io/name: {{ printf "%s-test" (include "tollgate.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: helm-test
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "tollgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tollgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tollgate.configMapName" -}}
{{- if .Values.config.existingConfigMap }}
{{- .Values.config.existingConfigMap }}
{{- else }}
{{- include "tollgate.fullname" . }}-config
{{- end }}
{{- end }}

{{/*
The image reference: repository:tag, or repository[:tag]@digest when image.digest is set.
*/}}
{{- define "tollgate.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion | toString }}
{{- if .Values.image.digest }}
{{- if .Values.image.tag }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- end }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
A boolean value as the literal clap accepts for TOLLGATE_* flags: "true" or "false".
*/}}
{{- define "tollgate.bool" -}}
{{- if . }}true{{ else }}false{{ end }}
{{- end }}

{{/*
Replicas the chart runs at least: the HPA's minReplicas, else replicaCount.
*/}}
{{- define "tollgate.minReplicas" -}}
{{- if .Values.autoscaling.enabled }}{{ int .Values.autoscaling.minReplicas }}{{ else }}{{ int .Values.replicaCount }}{{ end }}
{{- end }}

{{/*
A size ("64MiB", "256Mi", "1G", "1048576") in bytes, or "" when it cannot be parsed.
*/}}
{{- define "tollgate.bytes" -}}
{{- $s := toString . | trim }}
{{- $num := regexFind "^[0-9]+" $s }}
{{- $units := dict "" 1 "B" 1 "k" 1000 "K" 1000 "KB" 1000 "Ki" 1024 "KiB" 1024 "M" 1000000 "MB" 1000000 "Mi" 1048576 "MiB" 1048576 "G" 1000000000 "GB" 1000000000 "Gi" 1073741824 "GiB" 1073741824 "T" 1000000000000 "Ti" 1099511627776 "TiB" 1099511627776 }}
{{- $unit := trimPrefix $num $s }}
{{- if and $num (hasKey $units $unit) }}
{{- mul (int64 $num) (get $units $unit) }}
{{- end }}
{{- end }}

{{/*
Every value combination the chart refuses, with a message saying what to do. Included by the
Deployment, so `helm template`, `helm install` and `helm lint` all stop on it.
*/}}
{{- define "tollgate.validate" -}}
{{- $v := .Values }}
{{- if and $v.redis.enabled (not $v.redis.url) }}
{{- fail "redis.enabled is true but redis.url is empty (e.g. redis://redis:6379)" }}
{{- end }}
{{- if not (has $v.failureMode (list "error" "allow" "deny" "local")) }}
{{- fail (printf "failureMode must be error, allow, deny or local, not %q" (toString $v.failureMode)) }}
{{- end }}
{{- if not (has $v.readinessProbe.type (list "http" "grpc")) }}
{{- fail (printf "readinessProbe.type must be http or grpc, not %q" (toString $v.readinessProbe.type)) }}
{{- end }}
{{- $replicas := int (include "tollgate.minReplicas" .) }}
{{- if and (not $v.redis.enabled) (not $v.allowPerPodLimits) (or $v.autoscaling.enabled (gt (int $v.replicaCount) 1)) }}
{{- $n := ternary (printf "autoscaling (minReplicas %d, maxReplicas %d)" (int $v.autoscaling.minReplicas) (int $v.autoscaling.maxReplicas)) (printf "replicaCount %d" (int $v.replicaCount)) (and $v.autoscaling.enabled true) }}
{{- fail (printf "the in-memory store keeps counters per pod: with %s every pod enforces its own copy of every limit, so a limit of N admits up to N per replica. Enable Redis (redis.enabled=true, redis.url=...) for limits shared by all replicas, run one replica without autoscaling, or set allowPerPodLimits=true to accept per-pod limits." $n) }}
{{- end }}
{{- if and $v.admin.token.existingSecret $v.admin.token.create }}
{{- fail "admin.token: set existingSecret or create, not both" }}
{{- end }}
{{- if and $v.admin.write.enabled (not (or $v.admin.token.existingSecret $v.admin.token.create)) }}
{{- fail "admin.write.enabled (counter resets) needs a token: admin.token.existingSecret or admin.token.create=true" }}
{{- end }}
{{- if and $v.admin.write.enabled (has (int $v.admin.write.port) (list (int $v.containerPorts.http) (int $v.containerPorts.grpc))) }}
{{- fail (printf "admin.write.port %d is already the http or grpc container port" (int $v.admin.write.port)) }}
{{- end }}
{{- if and $v.grpcTls.enabled (not $v.grpcTls.secretName) }}
{{- fail "grpcTls.enabled needs grpcTls.secretName (a kubernetes.io/tls Secret with tls.crt and tls.key)" }}
{{- end }}
{{- if and $v.grpcTls.clientCa.enabled (not $v.grpcTls.enabled) }}
{{- fail "grpcTls.clientCa.enabled (mutual TLS) needs grpcTls.enabled" }}
{{- end }}
{{- if and $v.grpcTls.enabled $v.readinessProbe.enabled (eq $v.readinessProbe.type "grpc") }}
{{- fail "readinessProbe.type grpc cannot be used with grpcTls: the kubelet's gRPC probe speaks plaintext only. Use readinessProbe.type=http (GET /readyz on the admin port follows the same readiness)." }}
{{- end }}
{{- if and $v.redis.tls.existingSecret (not (or $v.redis.tls.caKey $v.redis.tls.certKey)) }}
{{- fail "redis.tls.existingSecret needs redis.tls.caKey and/or redis.tls.certKey + redis.tls.keyKey" }}
{{- end }}
{{- if ne (empty $v.redis.tls.certKey) (empty $v.redis.tls.keyKey) }}
{{- fail "redis.tls.certKey and redis.tls.keyKey go together (a client certificate and its key)" }}
{{- end }}
{{- if and $v.redis.tls.certKey (not $v.redis.tls.existingSecret) }}
{{- fail "redis.tls.certKey needs redis.tls.existingSecret" }}
{{- end }}
{{- $store := include "tollgate.bytes" $v.maxStoreBytes }}
{{- if not $store }}
{{- fail (printf "maxStoreBytes %q is not a size (e.g. 64MiB)" (toString $v.maxStoreBytes)) }}
{{- end }}
{{- $limit := "" }}
{{- if and $v.resources $v.resources.limits $v.resources.limits.memory }}
{{- $limit = include "tollgate.bytes" $v.resources.limits.memory }}
{{- end }}
{{- if and (not $v.redis.enabled) $limit (lt (int64 $limit) (add (int64 $store) 134217728)) }}
{{- fail (printf "resources.limits.memory %s leaves no room beside maxStoreBytes %s for the in-memory store: the limit must be at least maxStoreBytes plus 128Mi (the process needs memory beyond its counters: about 24Mi at rest and up to 70Mi that the allocator keeps under a flood of keys, RELIABILITY.md). Raise the limit or lower maxStoreBytes." (toString $v.resources.limits.memory) (toString $v.maxStoreBytes)) }}
{{- end }}
{{- with $v.podDisruptionBudget }}
{{- if .enabled }}
{{- if and (hasKey . "minAvailable") (hasKey . "maxUnavailable") }}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both" }}
{{- end }}
{{- if hasKey . "minAvailable" }}
{{- $min := .minAvailable }}
{{- if kindIs "string" $min }}
{{- if ge (int (trimSuffix "%" $min)) 100 }}
{{- fail (printf "podDisruptionBudget.minAvailable %s blocks every eviction (node drains, cluster upgrades never finish); use less than 100%%" $min) }}
{{- end }}
{{- else if and (gt (int $min) 0) (ge (int $min) $replicas) }}
{{- fail (printf "podDisruptionBudget.minAvailable %d with %d replica(s) blocks every eviction (node drains, cluster upgrades never finish): use a minAvailable below the replica count (the HPA's minReplicas when autoscaling), or maxUnavailable" (int $min) $replicas) }}
{{- end }}
{{- end }}
{{- if hasKey . "maxUnavailable" }}
{{- if or (eq (toString .maxUnavailable) "0") (eq (toString .maxUnavailable) "0%") }}
{{- fail "podDisruptionBudget.maxUnavailable 0 blocks every eviction (node drains, cluster upgrades never finish)" }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
tollgate.findLimit: the first rule (depth first, in config order) that carries a finite limit.
Argument: dict "rules" <descriptors list> "path" <list of "k=v">. Returns JSON
{"path": [...], "rpu": [requests_per_unit of the rule's limits]} or "".
A key-only rule gets the value "helm-test", a "prefix*" rule "prefixhelm-test"; keys and values
the query's descriptor syntax cannot carry (',', ';', '=', spaces) are passed over.
*/}}
{{- define "tollgate.findLimit" -}}
{{- $found := "" }}
{{- range $rule := (.rules | default list) }}
{{- if and (not $found) (kindIs "map" $rule) }}
{{- $key := toString ($rule.key | default "") }}
{{- $value := "helm-test" }}
{{- if hasKey $rule "value" }}
{{- $value = toString $rule.value }}
{{- if hasSuffix "*" $value }}
{{- $value = printf "%shelm-test" (trimSuffix "*" $value) }}
{{- end }}
{{- end }}
{{- if and $key $value (not (regexMatch "[,;=\\s]" (printf "%s%s" $key $value))) }}
{{- $path := append $.path (printf "%s=%s" $key $value) }}
{{- $limits := list }}
{{- with $rule.rate_limit }}{{ $limits = append $limits . }}{{ end }}
{{- range ($rule.rate_limits | default list) }}{{ $limits = append $limits . }}{{ end }}
{{- $rpu := list }}
{{- range $limits }}
{{- if and (kindIs "map" .) (not .unlimited) (hasKey . "requests_per_unit") }}
{{- $rpu = append $rpu (int64 .requests_per_unit) }}
{{- end }}
{{- end }}
{{- if $rpu }}
{{- $found = dict "path" $path "rpu" (uniq $rpu) | toJson }}
{{- else }}
{{- $found = include "tollgate.findLimit" (dict "rules" ($rule.descriptors | default list) "path" $path) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $found }}
{{- end }}

{{/*
The `helm test` query as JSON {"domain", "descriptor", "rpu"}: from tests.domain/descriptor,
else derived from the first file of config.files that has a limited descriptor.
*/}}
{{- define "tollgate.testQuery" -}}
{{- $t := .Values.tests }}
{{- if $t.domain }}
{{- if not $t.descriptor }}
{{- fail "tests.domain needs tests.descriptor (k=v[,k2=v2] with a limit in that domain)" }}
{{- end }}
{{- dict "domain" $t.domain "descriptor" $t.descriptor "rpu" ($t.expectRequestsPerUnit | default list) | toJson }}
{{- else if .Values.config.existingConfigMap }}
{{- fail "tests: with config.existingConfigMap the chart cannot see the limits; set tests.domain and tests.descriptor (a descriptor with a limit in that ConfigMap, e.g. tests.domain=ratelimit tests.descriptor=PATH=/productpage), or tests.enabled=false" }}
{{- else }}
{{- $found := "" }}
{{- range $name, $content := .Values.config.files }}
{{- if not $found }}
{{- $doc := dict }}
{{- if kindIs "string" $content }}{{ $doc = fromYaml $content }}{{ else if kindIs "map" $content }}{{ $doc = $content }}{{ end }}
{{- if and $doc.domain (not $doc.Error) }}
{{- with include "tollgate.findLimit" (dict "rules" ($doc.descriptors | default list) "path" list) }}
{{- $hit := fromJson . }}
{{- $found = dict "domain" (toString $doc.domain) "descriptor" (join "," $hit.path) "rpu" $hit.rpu | toJson }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if not $found }}
{{- fail "tests: no descriptor with a finite limit found in config.files; set tests.domain and tests.descriptor, or tests.enabled=false" }}
{{- end }}
{{- $found }}
{{- end }}
{{- end }}

{{/* The Secret holding the admin token, when there is one. */}}
{{- define "tollgate.adminTokenSecret" -}}
{{- if .Values.admin.token.existingSecret -}}
{{ .Values.admin.token.existingSecret }}
{{- else if .Values.admin.token.create -}}
{{ include "tollgate.fullname" . }}-admin-token
{{- end -}}
{{- end }}
