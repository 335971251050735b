{{/*
Names. `helm install hangar charts/hangar` gives every object the name "hangar".
*/}}
{{- define "hangar.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hangar.fullname" -}}
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

{{- define "hangar.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels. The control-plane pod carries component=control-plane and the selectors include it, so
sandbox pods (component=sandbox, part-of=hangar) are never matched by the Deployment or the Service.
*/}}
{{- define "hangar.baseLabels" -}}
helm.sh/chart: {{ include "hangar.chart" . }}
app.kubernetes.io/name: {{ include "hangar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hangar
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of the control-plane objects and pod (a superset of the selector labels). */}}
{{- define "hangar.labels" -}}
{{ include "hangar.baseLabels" . }}
app.kubernetes.io/component: control-plane
{{- end }}

{{/* Labels of the objects the chart creates for sandboxes (their NetworkPolicy, ServiceAccount). */}}
{{- define "hangar.sandboxObjectLabels" -}}
{{ include "hangar.baseLabels" . }}
app.kubernetes.io/component: sandbox
{{- end }}

{{- define "hangar.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hangar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: control-plane
{{- end }}

{{/* The labels the operator puts on every sandbox pod; the sandbox NetworkPolicy selects them. */}}
{{- define "hangar.sandboxSelectorLabels" -}}
app.kubernetes.io/component: sandbox
app.kubernetes.io/part-of: hangar
{{- end }}

{{- define "hangar.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hangar.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "hangar.sandboxServiceAccountName" -}}
{{- default (printf "%s-sandbox" (include "hangar.fullname" .)) .Values.sandbox.serviceAccount.name }}
{{- end }}

{{- define "hangar.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{- define "hangar.authSecretName" -}}
{{- default (printf "%s-auth" (include "hangar.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{- define "hangar.pvcName" -}}
{{- default (printf "%s-data" (include "hangar.fullname" .)) .Values.persistence.existingClaim }}
{{- end }}

{{/* The DNS name sandbox pods dial for the driver gateway, with its port. */}}
{{- define "hangar.gatewayAddress" -}}
{{- if .Values.gateway.address }}
{{- .Values.gateway.address }}
{{- else }}
{{- printf "%s.%s.svc.%s:%d" (include "hangar.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.gateway.port) }}
{{- end }}
{{- end }}

{{/* HANGAR_GOVERNANCE. A bare `off` in YAML is the boolean false, so accept that too. */}}
{{- define "hangar.governanceMode" -}}
{{- $mode := toString .Values.governance.mode }}
{{- if or (eq $mode "false") (eq $mode "") (eq $mode "<nil>") }}off{{ else }}{{ $mode }}{{ end }}
{{- end }}

{{- define "hangar.governanceOn" -}}
{{- if or (ne (include "hangar.governanceMode" .) "off") (regexMatch "(shadow|enforce)" (toString .Values.governance.modes)) }}true{{ end }}
{{- end }}

{{- define "hangar.sqliteInUse" -}}
{{- if not (or .Values.database.existingSecret .Values.database.url) }}true{{ end }}
{{- end }}

{{/*
Namespaces whose sessions this release serves, and where sandbox pods run. Empty when
watchAllNamespaces (then RBAC is cluster-wide).
*/}}
{{- define "hangar.watchNamespaces" -}}
{{- if not .Values.watchAllNamespaces }}
{{- $ns := list .Release.Namespace }}
{{- range .Values.watchNamespaces }}{{ $ns = append $ns . }}{{ end }}
{{- $ns | uniq | join "," }}
{{- end }}
{{- end }}

{{/* Fail early, with the fix, on settings hangar would reject at runtime. */}}
{{- define "hangar.validate" -}}
{{- $policies := list "auto" "ask" "deny-risky" "governed" }}
{{- if not (has .Values.approvals.policy $policies) }}
{{- fail (printf "approvals.policy must be one of %s, not %q" (join ", " $policies) (toString .Values.approvals.policy)) }}
{{- end }}
{{- $modes := list "off" "shadow" "enforce" }}
{{- $mode := include "hangar.governanceMode" . }}
{{- if not (has $mode $modes) }}
{{- fail (printf "governance.mode must be one of %s, not %q" (join ", " $modes) $mode) }}
{{- end }}
{{- if and (include "hangar.governanceOn" .) (not (or .Values.governance.existingSecret .Values.governance.webhookSecretName)) }}
{{- fail "governance is on: set governance.existingSecret (a Secret holding Tower's webhook signing secret) or governance.webhookSecretName (a vault credential name)" }}
{{- end }}
{{- if and (eq .Values.approvals.policy "governed") (not (include "hangar.governanceOn" .)) }}
{{- fail "approvals.policy=governed needs Tower: set governance.mode to shadow or enforce" }}
{{- end }}
{{- if and .Values.database.existingSecret .Values.database.url }}
{{- fail "set database.url or database.existingSecret, not both" }}
{{- end }}
{{- if and .Values.sandbox.createRuntimeClass (not .Values.sandbox.runtimeClassName) }}
{{- fail "sandbox.createRuntimeClass needs sandbox.runtimeClassName (the RuntimeClass to create)" }}
{{- end }}
{{- if and .Values.gke.cloudSqlProxy.enabled (not .Values.gke.cloudSqlProxy.instanceConnectionName) }}
{{- fail "gke.cloudSqlProxy.enabled needs gke.cloudSqlProxy.instanceConnectionName (PROJECT:REGION:INSTANCE)" }}
{{- end }}
{{- if lt (int .Values.sandbox.slots) 1 }}
{{- fail "sandbox.slots must be at least 1" }}
{{- end }}
{{- end }}

{{/*
Settings both processes read. The operator and the api share one configuration module, so they get
the same values; only the api gets the API tokens.
*/}}
{{- define "hangar.commonEnv" -}}
- name: HANGAR_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: HANGAR_WATCH_NAMESPACES
  value: {{ if .Values.watchAllNamespaces }}"*"{{ else }}{{ include "hangar.watchNamespaces" . | quote }}{{ end }}
{{- if .Values.database.existingSecret }}
- name: HANGAR_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.database.existingSecret }}
      key: {{ .Values.database.existingSecretKey }}
{{- else }}
- name: HANGAR_DATABASE_URL
  value: {{ .Values.database.url | default (printf "sqlite:///%s/hangar.db" .Values.persistence.mountPath) | quote }}
{{- end }}
- name: HANGAR_GATEWAY_ADDRESS
  value: {{ include "hangar.gatewayAddress" . | quote }}
- name: HANGAR_APPROVALS
  value: {{ .Values.approvals.policy | quote }}
- name: HANGAR_APPROVAL_TIMEOUT_SECONDS
  value: {{ .Values.approvals.timeoutSeconds | toString | quote }}
- name: HANGAR_MAX_SANDBOXES
  value: {{ .Values.sandbox.slots | toString | quote }}
- name: HANGAR_SANDBOX_RUNTIME_CLASS
  value: {{ .Values.sandbox.runtimeClassName | default "" | quote }}
- name: HANGAR_DRIVER_IMAGE
  value: {{ .Values.sandbox.driverImage | default (include "hangar.image" .) | quote }}
- name: HANGAR_DRIVER_MOUNT
  value: {{ .Values.sandbox.driverMount | default "init-copy" | quote }}
- name: HANGAR_SANDBOX_SERVICE_ACCOUNT
  value: {{ include "hangar.sandboxServiceAccountName" . | quote }}
- name: HANGAR_WORKSPACE_SNAPSHOT_CLASS
  value: {{ .Values.sandbox.snapshotClassName | default "" | quote }}
- name: HANGAR_GOVERNANCE
  value: {{ include "hangar.governanceMode" . | quote }}
{{- with .Values.governance.modes }}
- name: HANGAR_GOVERNANCE_MODES
  value: {{ . | quote }}
{{- end }}
{{- /* It names the Secret (and key) the api reads the signing secret from, and re-reads as it rotates:
the value itself never sits in the pod's environment. */}}
{{- if .Values.governance.existingSecret }}
- name: HANGAR_GOVERNANCE_WEBHOOK_SECRET
  value: {{ printf "%s/%s" .Values.governance.existingSecret .Values.governance.webhookSecretKey | quote }}
{{- else if .Values.governance.webhookSecretName }}
- name: HANGAR_GOVERNANCE_WEBHOOK_SECRET
  value: {{ .Values.governance.webhookSecretName | quote }}
{{- end }}
{{- with .Values.governance.url }}
- name: HANGAR_GOVERNANCE_URL
  value: {{ . | quote }}
{{- end }}
{{- if and .Values.governance.existingSecret .Values.governance.credentialKey }}
- name: HANGAR_GOVERNANCE_CREDENTIAL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.governance.existingSecret }}
      key: {{ .Values.governance.credentialKey }}
      # The re-read key is only needed once HANGAR_GOVERNANCE_URL is used; a Secret holding just
      # the webhook secret still starts the pod.
      optional: true
{{- else if .Values.governance.credentialName }}
- name: HANGAR_GOVERNANCE_CREDENTIAL
  value: {{ .Values.governance.credentialName | quote }}
{{- end }}
- name: HANGAR_GOVERNANCE_SUSPEND_AFTER_SECONDS
  value: {{ .Values.governance.suspendAfterSeconds | toString | quote }}
- name: HANGAR_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
- name: PYTHONUNBUFFERED
  value: "1"
- name: HOME
  value: /tmp
{{- end }}

{{/* Pod- and container-level hardening shared by every container the chart runs. */}}
{{- define "hangar.containerSecurityContext" -}}
{{- toYaml .Values.securityContext }}
{{- end }}
