{{- define "streamjob.name" -}}streamjob-operator{{- end -}}
{{- define "streamjob.labels" -}}
app.kubernetes.io/name: {{ include "streamjob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "streamjob.image" -}}{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}{{- end -}}
{{/* The rules the operator needs in each namespace it watches: nothing more. Each
verb is used by a named step of tests/e2e/test_rbac_minimal.py (docs/operations.md, "RBAC"). */}}
{{- define "streamjob.operatorRules" -}}
- apiGroups: [streamjob.io]
  resources: [streamjobs]
  verbs: [get, list, watch, patch]
- apiGroups: [streamjob.io]
  resources: [streamjobs/status]
  verbs: [patch]
# pods get and deletecollection, configmaps deletecollection: only to grant them
# to drivers (RBAC lets the operator grant only what it holds itself)
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete, deletecollection]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [list, create, delete, deletecollection]
- apiGroups: [""]
  resources: [services, serviceaccounts]
  verbs: [create, delete]
# get: the job's control token and the S3 credentials its spec names; never list or watch
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [create, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end -}}
{{/* What a driver's Spark calls: must equal operator/k8s/resources.py DRIVER_ROLE_RULES. */}}
{{- define "streamjob.driverRules" -}}
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete, deletecollection]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create, deletecollection]
{{- end -}}
{{/* Cluster-scoped reads kopf makes at start (it scans CRDs and namespaces). */}}
{{- define "streamjob.discoveryRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
{{- end -}}
