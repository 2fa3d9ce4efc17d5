// kstatus computes the status of Kubernetes objects with
// sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute, the library Flux
// (kustomize-controller's health checks) and kpt use to decide whether a
// resource is Current, InProgress, Failed or Terminating.
//
// Usage: kstatus OBJECT.(yaml|json) ...   ("-" reads one object from stdin);
// prints one JSON line per object: {"file": ..., "status": ..., "message": ...}
// Called by tests/gitops.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

func compute(path string) (map[string]string, error) {
	var raw []byte
	var err error
	if path == "-" {
		raw, err = io.ReadAll(os.Stdin)
	} else {
		raw, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// decoded as the API machinery does (integers stay int64), as kubectl and Flux hand objects to kstatus
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	res, err := status.Compute(u)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return map[string]string{"file": path, "status": res.Status.String(), "message": res.Message}, nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kstatus OBJECT.yaml ... (- for stdin)")
		os.Exit(2)
	}
	enc := json.NewEncoder(os.Stdout)
	for _, p := range os.Args[1:] {
		res, err := compute(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kstatus:", err)
			os.Exit(1)
		}
		_ = enc.Encode(res)
	}
}
