{{/* The chart's name, or nameOverride. */}}
{{- define "nightshift.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release-qualified name every object's name starts with. */}}
{{- define "nightshift.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "nightshift.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "nightshift.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "nightshift.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "nightshift.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one component (scheduler or worker): pass (list . "scheduler"). */}}
{{- define "nightshift.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nightshift.name" (index . 0) }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "nightshift.secretName" -}}
{{- .Values.auth.existingSecret | default (printf "%s-tokens" (include "nightshift.fullname" .)) }}
{{- end }}

{{- define "nightshift.schedulerAddress" -}}
{{- printf "%s-scheduler.%s.svc:%v" (include "nightshift.fullname" .) .Release.Namespace .Values.scheduler.grpcPort }}
{{- end }}

{{/* An env entry reading one token from the Secret: pass (list . "ENV_NAME" "key"). */}}
{{- define "nightshift.tokenEnv" -}}
- name: {{ index . 1 }}
  valueFrom:
    secretKeyRef:
      name: {{ include "nightshift.secretName" (index . 0) }}
      key: {{ index . 2 }}
{{- end }}

{{- define "nightshift.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "nightshift.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end }}

{{/*
Flags as a TOML config file (`flag-name = value` lines, sorted), the form
`nightshift-scheduler --config` and `nightshift-worker --config` read.
Strings, numbers, booleans and lists of strings: JSON's spelling of each is
TOML's.
*/}}
{{- define "nightshift.toml" -}}
{{- range $flag, $value := . }}
{{ $flag }} = {{ toJson $value }}
{{- end }}
{{- end }}

{{/* scheduler.toml: the flags the values set, then scheduler.config over them. */}}
{{- define "nightshift.schedulerToml" -}}
{{- $s := .Values.scheduler }}
{{- $flags := dict
  "listen" (printf "0.0.0.0:%d" (int $s.grpcPort))
  "db" "/var/lib/nightshift/nightshift.db"
  "metrics-port" $s.metricsPort
  "lease-seconds" $s.leaseSeconds
  "heartbeat-seconds" $s.heartbeatSeconds
  "max-attempts" $s.maxAttempts }}
{{- if $s.http.enabled }}
{{- $_ := set $flags "http-listen" (printf "0.0.0.0:%d" (int $s.http.port)) }}
{{- $_ := set $flags "http-files-dir" "/var/lib/nightshift/files" }}
{{- $_ := set $flags "http-max-upload-bytes" $s.http.maxUploadBytes }}
{{- $_ := set $flags "http-max-batch-requests" $s.http.maxBatchRequests }}
{{- end }}
{{- if .Values.tls.enabled }}
{{- $_ := set $flags "tls-cert" "/etc/nightshift/tls/tls.crt" }}
{{- $_ := set $flags "tls-key" "/etc/nightshift/tls/tls.key" }}
{{- end }}
{{- include "nightshift.toml" (mergeOverwrite $flags (deepCopy ($s.config | default dict))) }}
{{- end }}

{{/*
worker.toml: the flags the values set, then worker.config over them. The
worker's id differs per pod, so it stays on the command line.
*/}}
{{- define "nightshift.workerToml" -}}
{{- $w := .Values.worker }}
{{- $flags := dict
  "scheduler" (include "nightshift.schedulerAddress" .)
  "model-root" (list $w.models.mountPath)
  "device" $w.device
  "streaming" $w.streaming
  "metrics-port" $w.metricsPort }}
{{- with $w.memoryBudget }}
{{- $_ := set $flags "memory-budget" (toString .) }}
{{- end }}
{{- if .Values.tls.enabled }}
{{- $_ := set $flags "tls-ca" "/etc/nightshift/tls/ca.crt" }}
{{- end }}
{{- include "nightshift.toml" (mergeOverwrite $flags (deepCopy ($w.config | default dict))) }}
{{- end }}
