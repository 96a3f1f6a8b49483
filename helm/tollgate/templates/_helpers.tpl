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

{{- define "tollgate.labels" -}}
helm.sh/chart: {{ include "tollgate.chart" . }}
{{ include "tollgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
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

{{- define "tollgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{/*
A boolean value as the literal clap accepts for TOLLGATE_* flags: "true" or "false".
*/}}
{{- define "tollgate.bool" -}}
{{- if . }}true{{ else }}false{{ end }}
{{- end }}
