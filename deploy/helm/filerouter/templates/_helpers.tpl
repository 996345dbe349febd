{{/* The release's names and labels. */}}
{{- define "filerouter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "filerouter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "filerouter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "filerouter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "filerouter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "filerouter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "filerouter.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Whether the chart makes a Secret: inline secret values given. */}}
{{- define "filerouter.hasSecret" -}}
{{- if or .Values.environment.secrets .Values.database.url .Values.kv.url }}true{{ end }}
{{- end }}

{{- define "filerouter.hasConfigMap" -}}
{{- if or .Values.environment.values .Values.settings }}true{{ end }}
{{- end }}

{{- define "filerouter.hasDatabase" -}}
{{- if or .Values.database.existingSecret .Values.database.url }}true{{ end }}
{{- end }}

{{/* The migration Job runs: one project, on Postgres. */}}
{{- define "filerouter.migrationJob" -}}
{{- if and .Values.migration.enabled (not .Values.tenants.enabled) (include "filerouter.hasDatabase" .) }}true{{ end }}
{{- end }}

{{/* The pod's security context: the image's user (uid 10001), never root. */}}
{{- define "filerouter.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "filerouter.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
{{- end }}

{{/*
The environment of `run` and of the migration Job: the Postgres and Redis URLs and the cache
key from Secrets (secretKeyRef: the pod spec never holds them), the compiled-code cache, then
the ConfigMap's and the Secrets' names (envFrom).
*/}}
{{- define "filerouter.env" -}}
env:
  - name: FILEROUTER_CACHE_DIR
    value: /var/cache/filerouter
  {{- if .Values.database.existingSecret }}
  - name: FILEROUTER_DATABASE_URL
    valueFrom:
      secretKeyRef:
        name: {{ .Values.database.existingSecret }}
        key: {{ .Values.database.existingSecretKey }}
  {{- else if .Values.database.url }}
  - name: FILEROUTER_DATABASE_URL
    valueFrom:
      secretKeyRef:
        name: {{ include "filerouter.fullname" . }}
        key: database-url
  {{- end }}
  {{- if .Values.kv.existingSecret }}
  - name: FILEROUTER_KV_URL
    valueFrom:
      secretKeyRef:
        name: {{ .Values.kv.existingSecret }}
        key: {{ .Values.kv.existingSecretKey }}
  {{- else if .Values.kv.url }}
  - name: FILEROUTER_KV_URL
    valueFrom:
      secretKeyRef:
        name: {{ include "filerouter.fullname" . }}
        key: kv-url
  {{- end }}
  {{- if .Values.cacheKey.existingSecret }}
  - name: FILEROUTER_CACHE_KEY
    valueFrom:
      secretKeyRef:
        name: {{ .Values.cacheKey.existingSecret }}
        key: {{ .Values.cacheKey.existingSecretKey }}
  {{- end }}
{{- if or (include "filerouter.hasConfigMap" .) (and (not .Values.tenants.enabled) (or .Values.environment.secrets .Values.environment.existingSecret)) }}
envFrom:
  {{- if include "filerouter.hasConfigMap" . }}
  - configMapRef:
      name: {{ include "filerouter.fullname" . }}
  {{- end }}
  {{- if and (not .Values.tenants.enabled) .Values.environment.secrets }}
  - secretRef:
      name: {{ include "filerouter.fullname" . }}-environment
  {{- end }}
  {{- if and (not .Values.tenants.enabled) .Values.environment.existingSecret }}
  - secretRef:
      name: {{ .Values.environment.existingSecret }}
  {{- end }}
{{- end }}
{{- end }}

{{/* Hook annotations for what the migration Job needs before the release's own objects exist. */}}
{{- define "filerouter.preHook" -}}
{{- if include "filerouter.migrationJob" . }}
helm.sh/hook: pre-install,pre-upgrade
helm.sh/hook-weight: "-10"
helm.sh/hook-delete-policy: before-hook-creation
{{- end }}
{{- end }}
