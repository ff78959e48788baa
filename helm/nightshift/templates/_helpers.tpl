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
