#!/usr/bin/env python3
"""Tests the Helm chart in helm/nightshift with a real helm binary.

helm lint, helm template with default and non-default values, and checks on the
rendered objects: the scheduler StatefulSet and its PVC, GPU requests, the
read-only model volume, tokens only in Secrets, ServiceMonitor and dashboard
ConfigMap, probes, and values.schema.json refusing bad values. The daemons'
flags travel in a ConfigMap of TOML files (--config); the rendered files are
read by the real nightshift-scheduler and nightshift-worker from
$NIGHTSHIFT_BIN_DIR (ctest sets it; without it those tests fail).

helm is found as $NIGHTSHIFT_HELM, on PATH, or in <repo>/.cache/tools/helm
(scripts/bootstrap installs it); without it every test fails.
"""
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import tomllib
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


CONFIG_DIR = "/etc/nightshift/config"


def config(objects, daemon):
    """The flags of `daemon` ("scheduler" or "worker") in the rendered ConfigMap."""
    return tomllib.loads(only(objects, "ConfigMap", "-config")["data"][f"{daemon}.toml"])


def bin_path(name):
    bin_dir = os.environ.get("NIGHTSHIFT_BIN_DIR")
    assert bin_dir, "NIGHTSHIFT_BIN_DIR is not set (ctest sets it to the build's bin/)"
    return os.path.join(bin_dir, name)


def read(path):
    with open(path) as f:
        return f.read()


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
        for daemon in ("scheduler", "worker"):
            self.assertFalse([k for k in config(objects, daemon) if "token" in k],
                             f"token flag in {daemon}.toml")

    def assert_reads_config(self, objects, workload, daemon):
        """The pod mounts the ConfigMap and passes its file with --config first."""
        c = container(workload)
        self.assertEqual(c["args"][0], f"--config={CONFIG_DIR}/{daemon}.toml")
        mount = next(m for m in c["volumeMounts"] if m["mountPath"] == CONFIG_DIR)
        volume = next(v for v in workload["spec"]["template"]["spec"]["volumes"]
                      if v["name"] == mount["name"])
        self.assertEqual(volume["configMap"]["name"],
                         only(objects, "ConfigMap", "-config")["metadata"]["name"])
        self.assertEqual([i["path"] for i in volume["configMap"]["items"]], [f"{daemon}.toml"])

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
        self.assertEqual(kinds, ["ConfigMap", "Deployment", "Secret", "Service", "Service",
                             "Service", "StatefulSet"])

        scheduler = only(objects, "StatefulSet", "-scheduler")
        self.assertEqual(scheduler["spec"]["replicas"], 1)
        claim = scheduler["spec"]["volumeClaimTemplates"][0]
        self.assertEqual(claim["spec"]["resources"]["requests"]["storage"], "10Gi")
        self.assertEqual(claim["spec"]["accessModes"], ["ReadWriteOnce"])
        c = container(scheduler)
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        self.assertEqual(mounts[claim["metadata"]["name"]], "/var/lib/nightshift")
        self.assert_reads_config(objects, scheduler, "scheduler")
        self.assertEqual(c["args"], [f"--config={CONFIG_DIR}/scheduler.toml"])
        # The Batch API, its files on the PVC beside the database.
        self.assertEqual(config(objects, "scheduler"), {
            "db": "/var/lib/nightshift/nightshift.db", "listen": "0.0.0.0:50051",
            "metrics-port": 9090, "lease-seconds": 60, "heartbeat-seconds": 10,
            "max-attempts": 3, "http-listen": "0.0.0.0:8080",
            "http-files-dir": "/var/lib/nightshift/files",
            "http-max-upload-bytes": 200000000, "http-max-batch-requests": 50000})
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
        self.assert_reads_config(objects, worker, "worker")
        self.assertEqual(w["args"], [f"--config={CONFIG_DIR}/worker.toml",
                                     "--id=$(NIGHTSHIFT_WORKER_ID)"])
        self.assertEqual(config(objects, "worker"), {
            "scheduler": "rel-nightshift-scheduler.batch.svc:50051", "model-root": ["/models"],
            "device": "auto", "streaming": "auto", "metrics-port": 9091})
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
        self.assert_reads_config(objects, worker, "worker")
        worker_flags = config(objects, "worker")
        for flag, value in (("streaming", "always"), ("memory-budget", "68719476736"),
                            ("model-root", ["/checkpoints"]),
                            ("scheduler", "ns-scheduler.batch.svc:7000"),
                            ("tls-ca", "/etc/nightshift/tls/ca.crt")):
            self.assertEqual(worker_flags[flag], value, flag)
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
        scheduler_flags = config(objects, "scheduler")
        for flag, value in (("listen", "0.0.0.0:7000"), ("metrics-port", 7001),
                            ("lease-seconds", 5), ("max-attempts", 5),
                            ("tls-cert", "/etc/nightshift/tls/tls.crt"),
                            ("http-listen", "0.0.0.0:7002"),
                            ("http-max-upload-bytes", 1000000000)):
            self.assertEqual(scheduler_flags[flag], value, flag)
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
        self.assertEqual(config(objects, "worker")["device"], "cpu")
        self.assertTrue(w["image"].endswith(":0.1.0-cpu"))

    def test_the_batch_api_can_be_turned_off(self):
        objects = render("--set", "scheduler.http.enabled=false")
        c = container(only(objects, "StatefulSet", "-scheduler"))
        self.assertFalse([f for f in config(objects, "scheduler") if f.startswith("http-")])
        service = only(objects, "Service", "-scheduler")
        self.assertNotIn("http", [p["name"] for p in service["spec"]["ports"]])

    def test_existing_secret_is_used_and_not_created(self):
        objects = render("--set", "auth.existingSecret=my-tokens")
        self.assertEqual([o for o in objects if o["kind"] == "Secret"], [])
        env = container(only(objects, "StatefulSet"))["env"]
        self.assertEqual({e["valueFrom"]["secretKeyRef"]["name"] for e in env}, {"my-tokens"})

    def test_config_values_add_flags_and_roll_only_their_pods(self):
        base = render()
        objects = render("--set", "worker.config.kv-budget=8G",
                         "--set", "worker.config.model-root={/models,/more-models}",
                         "--set", "worker.config.streaming=never",
                         "--set", "scheduler.config.keepalive-seconds=5")
        worker_flags = config(objects, "worker")
        self.assertEqual(worker_flags["kv-budget"], "8G")
        self.assertEqual(worker_flags["model-root"], ["/models", "/more-models"])
        self.assertEqual(worker_flags["streaming"], "never")  # over worker.streaming
        self.assertEqual(config(objects, "scheduler")["keepalive-seconds"], 5)

        def checksum(objs, kind):
            pod = only(objs, kind)["spec"]["template"]["metadata"]
            return pod["annotations"]["checksum/config"]
        for kind in ("Deployment", "StatefulSet"):
            self.assertNotEqual(checksum(objects, kind), checksum(base, kind), kind)
        only_worker = render("--set", "worker.config.kv-budget=8G")
        self.assertEqual(checksum(only_worker, "StatefulSet"), checksum(base, "StatefulSet"))

    def test_the_rendered_scheduler_toml_starts_the_scheduler(self):
        """The real scheduler reads the rendered file; only the cluster's paths and
        ports are overridden on the command line (which wins over the file)."""
        objects = render("--set", "scheduler.config.keepalive-seconds=5")
        self.assertEqual(config(objects, "scheduler")["keepalive-seconds"], 5)
        with tempfile.TemporaryDirectory() as tmp:
            toml = os.path.join(tmp, "scheduler.toml")
            with open(toml, "w") as f:
                f.write(only(objects, "ConfigMap", "-config")["data"]["scheduler.toml"])
            log = os.path.join(tmp, "scheduler.log")
            with open(log, "w") as out:
                proc = subprocess.Popen(
                    [bin_path("nightshift-scheduler"), "--config", toml,
                     "--db", os.path.join(tmp, "ns.db"), "--listen", "127.0.0.1:0",
                     "--metrics-port", "-1", "--http-listen", "127.0.0.1:0",
                     "--http-files-dir", os.path.join(tmp, "files")],
                    stdout=out, stderr=subprocess.STDOUT)
            try:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and proc.poll() is None:
                    if "http listening on" in read(log):
                        break
                    time.sleep(0.1)
                text = read(log)
                self.assertIsNone(proc.poll(), text)
                self.assertIn("http listening on", text)
            finally:
                proc.kill()
                proc.wait()

    def test_the_rendered_worker_toml_is_read_by_the_worker(self):
        """Every key of the rendered worker.toml (custom values: TLS, a budget, a
        list) is a flag the real worker takes, with a value it accepts: a flag
        error stops it with exit status 2 (a later failure, such as the missing
        TLS CA, is status 1, and a worker still running after 5 s is 124)."""
        objects = render("-f", CUSTOM, "--set", "worker.config.kv-budget=8G",
                         "--set", "worker.config.model-root={/models,/more-models}")
        with tempfile.TemporaryDirectory() as tmp:
            toml = os.path.join(tmp, "worker.toml")
            with open(toml, "w") as f:
                f.write(only(objects, "ConfigMap", "-config")["data"]["worker.toml"])
            os.makedirs(os.path.join(tmp, "models"))
            run = lambda path: subprocess.run(  # noqa: E731
                ["timeout", "5", bin_path("nightshift-worker"), "--config", path,
                 "--scheduler", "127.0.0.1:1", "--model-root", os.path.join(tmp, "models"),
                 "--device", "cpu", "--metrics-port", "-1",
                 "--read-bandwidth", "1000000000", "--id", "chart-test",
                 "--state-dir", os.path.join(tmp, "state")],
                capture_output=True, text=True)
            result = run(toml)
            self.assertIn(result.returncode, (1, 124), result.stderr)
            with open(toml, "a") as f:
                f.write('kv-bugdet = "8G"\n')
            result = run(toml)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn("kv-bugdet", result.stderr)

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
                (["--set", "worker.config.Kv_Budget=8G"], "Kv_Budget"),
                (["--set", "typo=1"], "typo")):
            result = helm("template", "rel", CHART, *args, check=False)
            self.assertNotEqual(result.returncode, 0, args)
            self.assertIn(message, result.stderr, args)


if __name__ == "__main__":
    unittest.main(verbosity=2)
