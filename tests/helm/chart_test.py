#!/usr/bin/env python3
"""Tests the Helm chart in helm/nightshift with a real helm binary.

helm lint, helm template with default and non-default values, and checks on the
rendered objects: the scheduler StatefulSet and its PVC, GPU requests, the
read-only model volume, tokens only in Secrets, ServiceMonitor and dashboard
ConfigMap, probes, and values.schema.json refusing bad values.

helm is found as $NIGHTSHIFT_HELM, on PATH, or in <repo>/.cache/tools/helm
(scripts/bootstrap installs it); without it every test fails.
"""
import base64
import json
import os
import shutil
import subprocess
import unittest

import yaml

SOURCE = os.environ.get("NIGHTSHIFT_SOURCE_DIR",
                        os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
CHART = os.path.join(SOURCE, "helm", "nightshift")
CUSTOM = os.path.join(SOURCE, "tests", "helm", "values-custom.yaml")


def find_helm():
    for candidate in (os.environ.get("NIGHTSHIFT_HELM"), shutil.which("helm"),
                      os.path.join(SOURCE, ".cache", "tools", "helm")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise AssertionError("helm not found (set NIGHTSHIFT_HELM or run scripts/bootstrap)")


def helm(*args, check=True):
    result = subprocess.run([find_helm(), *args], capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result


def render(*args):
    """The objects `helm template` renders, as dicts."""
    out = helm("template", "rel", CHART, "--namespace", "batch", *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def only(objects, kind, name_suffix=""):
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"expected one {kind} *{name_suffix}, got {len(found)}"
    return found[0]


def container(workload):
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def secret_values(objects):
    values = []
    for secret in (o for o in objects if o["kind"] == "Secret"):
        values += [base64.b64decode(v).decode() for v in secret.get("data", {}).values()]
        values += list(secret.get("stringData", {}).values())
    return values


class ChartTest(unittest.TestCase):
    def assert_tokens_only_in_secrets(self, objects):
        secrets = secret_values(objects)
        self.assertEqual(len(secrets), 2)
        for token in secrets:
            self.assertGreaterEqual(len(token), 16)
            for o in objects:
                if o["kind"] != "Secret":
                    self.assertNotIn(token, yaml.safe_dump(o), f"token leaks into {o['kind']}")
        for o in objects:
            if o["kind"] not in ("Deployment", "DaemonSet", "StatefulSet"):
                continue
            for env in container(o).get("env", []):
                if "TOKEN" in env["name"]:
                    self.assertNotIn("value", env, f"{env['name']} given inline")
                    self.assertIn("secretKeyRef", env["valueFrom"])
            self.assertFalse(any("token" in a for a in container(o)["args"]), "token flag in args")

    def assert_hardened(self, workload):
        pod = workload["spec"]["template"]["spec"]
        self.assertTrue(pod["securityContext"]["runAsNonRoot"])
        self.assertNotEqual(pod["securityContext"]["runAsUser"], 0)
        sc = container(workload)["securityContext"]
        self.assertFalse(sc["allowPrivilegeEscalation"])
        self.assertTrue(sc["readOnlyRootFilesystem"])

    def test_lint(self):
        helm("lint", "--strict", CHART)
        helm("lint", "--strict", CHART, "-f", CUSTOM)

    def test_defaults(self):
        objects = render()
        kinds = sorted(o["kind"] for o in objects)
        self.assertEqual(kinds, ["Deployment", "Secret", "Service", "Service", "Service",
                                 "StatefulSet"])

        scheduler = only(objects, "StatefulSet", "-scheduler")
        self.assertEqual(scheduler["spec"]["replicas"], 1)
        claim = scheduler["spec"]["volumeClaimTemplates"][0]
        self.assertEqual(claim["spec"]["resources"]["requests"]["storage"], "10Gi")
        self.assertEqual(claim["spec"]["accessModes"], ["ReadWriteOnce"])
        c = container(scheduler)
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        self.assertEqual(mounts[claim["metadata"]["name"]], "/var/lib/nightshift")
        self.assertIn("--db=/var/lib/nightshift/nightshift.db", c["args"])
        self.assertIn("--listen=0.0.0.0:50051", c["args"])
        self.assertIn("--metrics-port=9090", c["args"])
        # The Batch API, its files on the PVC beside the database.
        for arg in ("--http-listen=0.0.0.0:8080", "--http-files-dir=/var/lib/nightshift/files",
                    "--http-max-upload-bytes=200000000", "--http-max-batch-requests=50000"):
            self.assertIn(arg, c["args"])
        self.assertIn({"name": "http", "containerPort": 8080}, c["ports"])
        self.assertEqual(c["readinessProbe"]["grpc"]["port"], 50051)
        self.assertEqual(c["livenessProbe"]["grpc"]["port"], 50051)
        self.assertEqual(c["image"], "ghcr.io/nightshift/nightshift-scheduler:0.1.0")
        self.assert_hardened(scheduler)

        service = only(objects, "Service", "-scheduler")
        self.assertEqual({p["name"]: p["port"] for p in service["spec"]["ports"]},
                         {"grpc": 50051, "metrics": 9090, "http": 8080})
        self.assertEqual(scheduler["spec"]["serviceName"],
                         only(objects, "Service", "-scheduler-headless")["metadata"]["name"])

        worker = only(objects, "Deployment", "-worker")
        w = container(worker)
        self.assertEqual(w["resources"]["limits"]["nvidia.com/gpu"], 1)
        self.assertEqual(w["image"], "ghcr.io/nightshift/nightshift-worker:0.1.0-cuda")
        self.assertIn("--device=auto", w["args"])
        self.assertIn("--scheduler=rel-nightshift-scheduler.batch.svc:50051", w["args"])
        pod = worker["spec"]["template"]["spec"]
        self.assertEqual(pod["nodeSelector"], {"nvidia.com/gpu.present": "true"})
        self.assertEqual(pod["tolerations"][0]["key"], "nvidia.com/gpu")
        models = next(v for v in pod["volumes"] if v["name"] == "models")
        self.assertEqual(models["hostPath"]["path"], "/srv/nightshift/models")
        self.assertTrue(next(m for m in w["volumeMounts"] if m["name"] == "models")["readOnly"])
        self.assert_hardened(worker)
        self.assert_tokens_only_in_secrets(objects)

    def test_tokens_are_generated_fresh_when_not_given(self):
        first, second = secret_values(render()), secret_values(render())
        self.assertEqual(len(first), 2)
        self.assertNotEqual(first[0], first[1])  # client and worker differ
        self.assertNotEqual(first, second)
        self.assertTrue(all(len(t) == 40 and t.isalnum() for t in first))

    def test_non_default_values(self):
        objects = render("-f", CUSTOM)
        secret = only(objects, "Secret")
        self.assertEqual(sorted(secret_values([secret])),
                         ["client-secret-token-0123456789", "worker-secret-token-9876543210"])
        self.assert_tokens_only_in_secrets(objects)

        self.assertEqual([o for o in objects if o["kind"] == "Deployment"], [])
        worker = only(objects, "DaemonSet", "-worker")
        w = container(worker)
        self.assertEqual(w["resources"]["limits"]["nvidia.com/gpu"], 2)
        self.assertEqual(w["resources"]["limits"]["memory"], "96Gi")
        for arg in ("--streaming=always", "--memory-budget=68719476736",
                    "--model-root=/checkpoints", "--scheduler=ns-scheduler.batch.svc:7000",
                    "--tls-ca=/etc/nightshift/tls/ca.crt"):
            self.assertIn(arg, w["args"])
        pod = worker["spec"]["template"]["spec"]
        self.assertEqual(pod["nodeSelector"], {"gpu-pool": "spare"})
        self.assertEqual(pod["tolerations"][0]["key"], "spare")
        models = next(v for v in pod["volumes"] if v["name"] == "models")
        self.assertEqual(models["persistentVolumeClaim"],
                         {"claimName": "llm-checkpoints", "readOnly": True})
        self.assertNotIn("hostPath", models)
        worker_id = next(e for e in w["env"] if e["name"] == "NIGHTSHIFT_WORKER_ID")
        self.assertEqual(worker_id["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName")

        scheduler = only(objects, "StatefulSet", "-scheduler")
        claim = scheduler["spec"]["volumeClaimTemplates"][0]["spec"]
        self.assertEqual(claim["resources"]["requests"]["storage"], "50Gi")
        self.assertEqual(claim["storageClassName"], "fast-ssd")
        c = container(scheduler)
        for arg in ("--listen=0.0.0.0:7000", "--metrics-port=7001", "--lease-seconds=5",
                    "--max-attempts=5", "--tls-cert=/etc/nightshift/tls/tls.crt"):
            self.assertIn(arg, c["args"])
        self.assertIn("--http-listen=0.0.0.0:7002", c["args"])
        self.assertIn("--http-max-upload-bytes=1000000000", c["args"])
        service = only(objects, "Service", "-scheduler")
        self.assertIn({"name": "http", "port": 7002, "targetPort": "http"},
                      service["spec"]["ports"])
        self.assertEqual(c["readinessProbe"]["tcpSocket"]["port"], "grpc")  # no gRPC probe over TLS
        self.assertNotIn("grpc", c["livenessProbe"])

        monitor = only(objects, "ServiceMonitor")
        self.assertEqual(monitor["metadata"]["labels"]["release"], "kube-prometheus-stack")
        self.assertEqual(monitor["spec"]["endpoints"][0]["port"], "metrics")
        selector = monitor["spec"]["selector"]["matchLabels"]
        scraped = [o for o in objects if o["kind"] == "Service" and
                   selector.items() <= o["metadata"]["labels"].items()]
        self.assertEqual(sorted(o["metadata"]["name"] for o in scraped),
                         ["ns-scheduler", "ns-worker-metrics"])
        for service in scraped:
            self.assertIn("metrics", [p["name"] for p in service["spec"]["ports"]])

        dashboard = only(objects, "ConfigMap", "-dashboard")
        self.assertEqual(dashboard["metadata"]["labels"]["grafana_dashboard"], "1")
        self.assertEqual(dashboard["metadata"]["labels"]["team"], "ml")
        self.assertEqual(dashboard["metadata"]["namespace"], "monitoring")
        with open(os.path.join(CHART, "dashboards", "nightshift.json")) as f:
            self.assertEqual(json.loads(dashboard["data"]["nightshift.json"]), json.load(f))

    def test_cpu_worker_requests_no_gpu(self):
        objects = render("--set", "worker.device=cpu", "--set", "worker.image.variant=cpu")
        w = container(only(objects, "Deployment", "-worker"))
        self.assertNotIn("nvidia.com/gpu", w["resources"].get("limits", {}))
        self.assertIn("--device=cpu", w["args"])
        self.assertTrue(w["image"].endswith(":0.1.0-cpu"))

    def test_the_batch_api_can_be_turned_off(self):
        objects = render("--set", "scheduler.http.enabled=false")
        c = container(only(objects, "StatefulSet", "-scheduler"))
        self.assertFalse([a for a in c["args"] if a.startswith("--http-")])
        service = only(objects, "Service", "-scheduler")
        self.assertNotIn("http", [p["name"] for p in service["spec"]["ports"]])

    def test_existing_secret_is_used_and_not_created(self):
        objects = render("--set", "auth.existingSecret=my-tokens")
        self.assertEqual([o for o in objects if o["kind"] == "Secret"], [])
        env = container(only(objects, "StatefulSet"))["env"]
        self.assertEqual({e["valueFrom"]["secretKeyRef"]["name"] for e in env}, {"my-tokens"})

    def test_bad_values_are_refused(self):
        for args, message in (
                (["--set", "worker.kind=StatefulSet"], "worker.kind"),
                (["--set", "worker.streaming=sometimes"], "worker.streaming"),
                (["--set", "worker.device=tpu"], "worker.device"),
                (["--set", "scheduler.grpcPort=70000"], "scheduler.grpcPort"),
                (["--set", "scheduler.http.port=0"], "scheduler.http.port"),
                (["--set", "worker.gpu.count=0"], "gpu.count"),
                (["--set", "worker.models.existingClaim=pvc"], "not both"),
                (["--set", "tls.enabled=true"], "tls.secretName"),
                (["--set", "typo=1"], "typo")):
            result = helm("template", "rel", CHART, *args, check=False)
            self.assertNotEqual(result.returncode, 0, args)
            self.assertIn(message, result.stderr, args)


if __name__ == "__main__":
    unittest.main(verbosity=2)
