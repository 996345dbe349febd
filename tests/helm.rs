//! The Helm chart, `deploy/helm/filerouter`: rendered by Helm's own template engine (Helm 4's
//! Go SDK, from PyPI's `helm-python-sdk`) with its default values, with overrides (Postgres and
//! Redis from Secrets, `environment` values and secrets, settings) and with the tenants
//! variant; `helm lint --strict` on each; every manifest validated strictly (unknown fields
//! refused) by `kubernetes-validate` against the Kubernetes API's JSON schemas it ships, for the
//! oldest Kubernetes the chart accepts and the newest the validator knows. Then what matters to
//! a running filerouter: probes on the admin port's `/readyz` and `/livez`, a grace period
//! above the drain, the migration Job as a pre-install and pre-upgrade hook, URLs and secrets
//! referenced from Secrets and never inlined in a pod's spec, pods that are not root, the
//! tenants' shared volume.
//!
//! The tools live in `tests/.k8s-venv` (`tests/helm/requirements.txt`), which `bash .ci/run`
//! installs. Without it the tests skip loudly, and fail in CI (`FILEROUTER_REQUIRE_BROWSER=1`).

use crate::support;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use serde_json::{Value, json};
use support::tools::{missing, workspace};

/// The Kubernetes versions the manifests are validated for: the chart's `kubeVersion` floor and
/// the newest schemas kubernetes-validate 1.37 ships.
const KUBERNETES: [&str; 2] = ["1.25.0", "1.37.0"];

/// `tests/.k8s-venv`, or None after reporting it missing.
fn tools(test: &str) -> Option<PathBuf> {
    let venv = workspace().join("tests/.k8s-venv");
    if venv.join("bin/python").is_file() && venv.join("bin/kubernetes-validate").is_file() {
        return Some(venv);
    }
    missing(
        test,
        "no tests/.k8s-venv with helm-python-sdk and kubernetes-validate",
        "them: python3 -m venv tests/.k8s-venv && tests/.k8s-venv/bin/pip install -r tests/helm/requirements.txt",
    );
    None
}

fn chart() -> PathBuf {
    workspace().join("deploy/helm/filerouter")
}

/// Renders the chart as `helm template shop --namespace web` would, and lints it: the
/// documents (parsed), the YAML stream, the lint report.
const RENDER: &str = r#"
import json, sys
import helm_python as helm
import yaml

chart, values = sys.argv[1], json.loads(sys.argv[2])
try:
    with helm.Chart.load(chart) as c:
        out = c.render(values, name="shop", namespace="web", is_install=True)
except helm.HelmError as e:
    print(json.dumps({"error": str(e)}))
    sys.exit(0)
docs, texts = [], []
for name in sorted(out):
    if name.endswith("NOTES.txt"):
        continue
    for doc in yaml.safe_load_all(out[name]):
        if doc:
            docs.append({"template": name, "manifest": doc})
    texts.append(out[name])
lint = helm.lint(chart, values, strict=True)
print(json.dumps({"docs": docs, "stream": "\n---\n".join(texts), "lint": lint, "helm": helm.helm_sdk_version()}))
"#;

struct Rendered {
    docs: Vec<Value>,
    stream: String,
}

impl Rendered {
    /// The one manifest of `kind` (named `name`, if given).
    fn one(&self, kind: &str) -> &Value {
        let found: Vec<&Value> = self.docs.iter().filter(|d| d["kind"] == kind).collect();
        assert_eq!(found.len(), 1, "one {kind}: {}", self.kinds().join(", "));
        found[0]
    }

    fn all(&self, kind: &str) -> Vec<&Value> {
        self.docs.iter().filter(|d| d["kind"] == kind).collect()
    }

    fn kinds(&self) -> Vec<String> {
        let mut kinds: Vec<String> = self
            .docs
            .iter()
            .map(|d| d["kind"].as_str().unwrap_or("?").to_string())
            .collect();
        kinds.sort();
        kinds
    }
}

/// Render with `values`: the manifests, or Helm's error (a `fail` in a template).
fn render(venv: &Path, values: &Value) -> Result<Rendered, String> {
    let out = Command::new(venv.join("bin/python"))
        .arg("-c")
        .arg(RENDER)
        .arg(chart())
        .arg(values.to_string())
        .output()
        .expect("tests/.k8s-venv/bin/python");
    assert!(
        out.status.success(),
        "rendering failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).expect("the render script's JSON");
    if let Some(error) = answer["error"].as_str() {
        return Err(error.to_string());
    }
    // helm lint --strict: nothing above "info" (severity 1).
    let lint = &answer["lint"];
    assert_eq!(lint["errors"], json!([]), "helm lint: {lint}");
    for message in lint["messages"].as_array().unwrap() {
        assert!(
            message["severity"].as_i64() <= Some(1),
            "helm lint: {message}"
        );
    }
    assert_eq!(answer["helm"], "v4.2.3", "the Helm SDK pinned");
    Ok(Rendered {
        docs: answer["docs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["manifest"].clone())
            .collect(),
        stream: answer["stream"].as_str().unwrap().to_string(),
    })
}

/// Every manifest of every render, validated strictly against each version's schemas: each
/// must be reported as passed (an unknown kind would be skipped with a warning, not passed).
fn validate(venv: &Path, renders: &[(&str, &Rendered)]) {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    let mut expected = 0;
    for (label, rendered) in renders {
        let file = dir.path().join(format!("{label}.yaml"));
        std::fs::write(&file, &rendered.stream).unwrap();
        files.push(file);
        expected += rendered.docs.len();
    }
    for version in KUBERNETES {
        let out = Command::new(venv.join("bin/kubernetes-validate"))
            .args(["--strict", "--kubernetes-version", version])
            .args(&files)
            .output()
            .expect("kubernetes-validate");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "kubernetes {version}:\n{said}");
        let passed = said.matches(" passed for resource ").count();
        assert_eq!(
            passed, expected,
            "kubernetes {version}: every manifest passes:\n{said}"
        );
        assert!(!said.contains("ERROR") && !said.contains("WARN"), "{said}");
    }
}

/// The pod template's first container named `name`.
fn container<'a>(workload: &'a Value, name: &str) -> &'a Value {
    workload["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("container {name} in {workload}"))
}

fn args(container: &Value) -> Vec<String> {
    container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// The value after `flag` in `args`.
fn flag<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == flag)
        .map(|at| args[at + 1].as_str())
}

/// The env entry `name` of a container.
fn env<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
}

/// What every render's Deployment must do: run the image's binary as a user that is not root,
/// on read-only root, with probes on the admin port and a grace period above the drain.
fn check_deployment(rendered: &Rendered) {
    let deployment = rendered.one("Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let run = container(deployment, "filerouter");
    assert_eq!(run["command"], json!(["filerouter"]));
    let args = args(run);
    assert_eq!(args[0], "run", "{args:?}");
    let admin = flag(&args, "--admin").expect("--admin");
    let admin_port: u64 = admin.strip_prefix("0.0.0.0:").unwrap().parse().unwrap();
    let http_port: u64 = flag(&args, "--port").unwrap().parse().unwrap();
    assert_ne!(admin_port, http_port);
    let port_named = |name: &str| {
        run["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .and_then(|p| p["containerPort"].as_u64())
    };
    assert_eq!(port_named("admin"), Some(admin_port));
    assert_eq!(port_named("http"), Some(http_port));
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/livez")] {
        let get = &run[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}: {get}");
        assert_eq!(get["port"], "admin", "{probe} on the admin port: {get}");
    }
    for key in ["requests", "limits"] {
        assert!(
            run["resources"][key]["memory"].is_string(),
            "resources.{key}.memory"
        );
    }
    assert!(run["resources"]["requests"]["cpu"].is_string());
    // SIGTERM: readiness off and serving on for --drain-delay (no preStop needed), then the
    // requests in flight get --graceful-timeout; Kubernetes must wait for both.
    let drain: u64 = flag(&args, "--drain-delay").unwrap().parse().unwrap();
    let graceful: u64 = flag(&args, "--graceful-timeout").unwrap().parse().unwrap();
    assert!(
        drain > 0,
        "a drain delay while the endpoints controller catches up"
    );
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(grace > drain + graceful, "{grace} <= {drain} + {graceful}");
    assert!(
        run["lifecycle"].is_null(),
        "no preStop hook: --drain-delay does its work"
    );
    // Not root: the pod says so, and every container keeps no privileges.
    let security = &pod["securityContext"];
    assert_eq!(security["runAsNonRoot"], true, "{security}");
    assert!(
        security["runAsUser"].as_u64().is_some_and(|u| u != 0),
        "{security}"
    );
    let containers = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(pod["initContainers"].as_array().into_iter().flatten());
    for c in containers {
        let security = &c["securityContext"];
        assert_eq!(security["allowPrivilegeEscalation"], false, "{security}");
        assert_eq!(security["readOnlyRootFilesystem"], true, "{security}");
        assert_eq!(
            security["capabilities"]["drop"],
            json!(["ALL"]),
            "{security}"
        );
    }
    // The Service sends to the public port only.
    let service = rendered.one("Service");
    let ports = service["spec"]["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 1, "{service}");
    assert_eq!(ports[0]["targetPort"], "http");
    // HPA and PDB select this Deployment's pods.
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (key, value) in deployment["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&labels[key], value);
    }
    for pdb in rendered.all("PodDisruptionBudget") {
        assert_eq!(pdb["apiVersion"], "policy/v1");
        assert_eq!(
            pdb["spec"]["selector"]["matchLabels"],
            deployment["spec"]["selector"]["matchLabels"]
        );
    }
    for hpa in rendered.all("HorizontalPodAutoscaler") {
        assert_eq!(hpa["apiVersion"], "autoscaling/v2");
        assert_eq!(
            hpa["spec"]["scaleTargetRef"]["name"],
            deployment["metadata"]["name"]
        );
        assert!(
            deployment["spec"]["replicas"].is_null(),
            "the HPA owns the replica count"
        );
    }
}

const OVERRIDES: &str = r#"{
    "image": {"repository": "registry.example.com/shop", "tag": "2.1.0"},
    "database": {"existingSecret": "shop-postgres", "existingSecretKey": "url"},
    "kv": {"url": "redis://:kv-password-1234@cache.internal:6379/0", "prefix": "filerouter:shop:"},
    "cacheKey": {"existingSecret": "shop-cache-key"},
    "environment": {
        "values": {"SITE_TITLE": "The Shop"},
        "secrets": {"JWT_SECRET": "jwt-secret-value-5678"},
        "existingSecret": "shop-more-secrets"
    },
    "settings": {"RUST_LOG": "info", "FILEROUTER_IMAGES_MAX_MB": 1024},
    "run": {"workers": 8, "drainDelay": 10, "extraArgs": ["--no-access-log"]},
    "autoscaling": {"enabled": false},
    "replicaCount": 3,
    "podDisruptionBudget": {"minAvailable": 2}
}"#;

#[test]
fn the_chart_renders_and_every_manifest_validates_against_the_kubernetes_schemas() {
    const TEST: &str =
        "the_chart_renders_and_every_manifest_validates_against_the_kubernetes_schemas";
    let Some(venv) = tools(TEST) else { return };
    let started = Instant::now();

    // Default values: one project on SQLite, so no Job, and `run --migrate` at start.
    let defaults = render(&venv, &json!({})).expect("the defaults render");
    assert_eq!(
        defaults.kinds(),
        [
            "Deployment",
            "HorizontalPodAutoscaler",
            "PodDisruptionBudget",
            "Service"
        ]
    );
    check_deployment(&defaults);
    let run = args(container(defaults.one("Deployment"), "filerouter"));
    assert!(run.contains(&"--migrate".to_string()), "{run:?}");
    assert_eq!(flag(&run, "--project"), Some("/app"));
    assert_eq!(flag(&run, "--data-dir"), Some("/app/.data"));

    // Postgres and Redis from Secrets, the migration Job, environment values and secrets.
    let overrides: Value = serde_json::from_str(OVERRIDES).unwrap();
    let shop = render(&venv, &overrides).expect("the overrides render");
    check_deployment(&shop);
    assert_eq!(
        shop.kinds(),
        [
            "ConfigMap",
            "Deployment",
            "Job",
            "PodDisruptionBudget",
            "Secret",
            "Secret",
            "Service"
        ]
    );
    let deployment = shop.one("Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let run = container(deployment, "filerouter");
    assert_eq!(run["image"], "registry.example.com/shop:2.1.0");
    let run_args = args(run);
    assert!(
        !run_args.contains(&"--migrate".to_string()),
        "the Job migrates: {run_args:?}"
    );
    assert_eq!(flag(&run_args, "--workers"), Some("8"));
    assert_eq!(flag(&run_args, "--kv-prefix"), Some("filerouter:shop:"));
    assert!(run_args.contains(&"--no-access-log".to_string()));
    assert_eq!(shop.one("PodDisruptionBudget")["spec"]["minAvailable"], 2);

    // The migration Job: `filerouter db migrate` on the image's project, a hook that Helm runs
    // (and waits for) before the Deployment changes, on install and on every upgrade.
    let job = shop.one("Job");
    let hook = job["metadata"]["annotations"]["helm.sh/hook"]
        .as_str()
        .unwrap();
    let hooks: Vec<&str> = hook.split(',').collect();
    assert!(
        hooks.contains(&"pre-install") && hooks.contains(&"pre-upgrade"),
        "{hook}"
    );
    let migrate = container(job, "migrate");
    assert_eq!(migrate["command"], json!(["filerouter"]));
    assert_eq!(args(migrate)[..4], ["db", "migrate", "--project", "/app"]);
    assert_eq!(
        migrate["image"], run["image"],
        "the Job migrates with the release's image"
    );
    assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
    assert_eq!(
        job["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"],
        true
    );
    // What the Job reads (the chart's Secrets and ConfigMap) exists before it: hooks of a
    // lower weight.
    let weight = |doc: &Value| -> i64 {
        doc["metadata"]["annotations"]["helm.sh/hook-weight"]
            .as_str()
            .expect("a hook weight")
            .parse()
            .unwrap()
    };
    for doc in shop.all("Secret").into_iter().chain(shop.all("ConfigMap")) {
        let hook = doc["metadata"]["annotations"]["helm.sh/hook"]
            .as_str()
            .unwrap_or("");
        assert!(
            hook.contains("pre-install") && hook.contains("pre-upgrade"),
            "{doc}"
        );
        assert!(weight(doc) < weight(job), "{doc}");
    }

    // URLs and secrets are referenced from Secrets, never written into a pod's spec.
    for c in [run, migrate] {
        let database = env(c, "FILEROUTER_DATABASE_URL").expect("FILEROUTER_DATABASE_URL");
        assert_eq!(
            database["valueFrom"]["secretKeyRef"],
            json!({"name": "shop-postgres", "key": "url"})
        );
        let kv = env(c, "FILEROUTER_KV_URL").expect("FILEROUTER_KV_URL");
        assert_eq!(
            kv["valueFrom"]["secretKeyRef"],
            json!({"name": "shop-filerouter", "key": "kv-url"})
        );
        let key = env(c, "FILEROUTER_CACHE_KEY").expect("FILEROUTER_CACHE_KEY");
        assert_eq!(key["valueFrom"]["secretKeyRef"]["name"], "shop-cache-key");
        for entry in c["env"].as_array().unwrap() {
            assert!(
                entry["value"].is_null() || entry["name"] == "FILEROUTER_CACHE_DIR",
                "a value inlined in the pod's spec: {entry}"
            );
        }
        assert_eq!(
            c["envFrom"],
            json!([
                {"configMapRef": {"name": "shop-filerouter"}},
                {"secretRef": {"name": "shop-filerouter-environment"}},
                {"secretRef": {"name": "shop-more-secrets"}}
            ])
        );
    }
    for workload in [deployment, job] {
        let text = workload.to_string();
        for secret in ["kv-password-1234", "jwt-secret-value-5678"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
    }
    let secrets = shop.all("Secret");
    let data = |name: &str| {
        secrets
            .iter()
            .find(|s| s["metadata"]["name"] == name)
            .map(|s| s["data"].clone())
            .unwrap_or_else(|| panic!("Secret {name}"))
    };
    assert_eq!(
        data("shop-filerouter")["kv-url"],
        base64("redis://:kv-password-1234@cache.internal:6379/0")
    );
    assert_eq!(
        data("shop-filerouter-environment")["JWT_SECRET"],
        base64("jwt-secret-value-5678")
    );
    assert_eq!(
        shop.one("ConfigMap")["data"],
        json!({"SITE_TITLE": "The Shop", "RUST_LOG": "info", "FILEROUTER_IMAGES_MAX_MB": "1024"})
    );
    // A changed secret rolls the pods (they read their environment at start).
    let mut changed = overrides.clone();
    changed["environment"]["secrets"]["JWT_SECRET"] = json!("another-secret-value");
    let rolled = render(&venv, &changed).unwrap();
    let checksum = |r: &Rendered| {
        r.one("Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/secret"]
            .clone()
    };
    assert_ne!(checksum(&rolled), checksum(&shop));

    // The tenants variant: `run --tenants` on the shared volume (ReadWriteMany), which an init
    // container fills from the image; no Job (tenants migrate themselves) and no environment
    // of the server's for route code.
    let tenants_values = json!({
        "tenants": {"enabled": true, "volume": {"storageClass": "nfs"}},
        "database": {"existingSecret": "unused"},
        "environment": {"secrets": {"JWT_SECRET": "not-for-tenants"}},
        "autoscaling": {"minReplicas": 3}
    });
    let tenants = render(&venv, &tenants_values).expect("the tenants variant renders");
    check_deployment(&tenants);
    assert_eq!(
        tenants.kinds(),
        [
            "Deployment",
            "HorizontalPodAutoscaler",
            "PersistentVolumeClaim",
            "PodDisruptionBudget",
            "Service"
        ]
    );
    let deployment = tenants.one("Deployment");
    let run = container(deployment, "filerouter");
    let run_args = args(run);
    assert_eq!(
        flag(&run_args, "--tenants"),
        Some("/srv/tenants/tenants.toml")
    );
    assert!(flag(&run_args, "--project").is_none() && !run_args.contains(&"--migrate".into()));
    assert!(run["envFrom"].is_null(), "{run}");
    let claim = tenants.one("PersistentVolumeClaim");
    assert_eq!(claim["spec"]["accessModes"], json!(["ReadWriteMany"]));
    assert_eq!(claim["spec"]["storageClassName"], "nfs");
    let pod = &deployment["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"])
        .expect("the claim is a volume of the pod");
    let mounted_at = |c: &Value| {
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == volume["name"])
            .map(|m| m["mountPath"].clone())
    };
    assert_eq!(mounted_at(run), Some(json!("/srv/tenants")));
    let seed = &pod["initContainers"][0];
    assert_eq!(mounted_at(seed), Some(json!("/mnt/tenants")));
    assert_eq!(seed["image"], run["image"]);

    validate(
        &venv,
        &[
            ("defaults", &defaults),
            ("overrides", &shop),
            ("tenants", &tenants),
        ],
    );
    eprintln!(
        "the chart rendered 4 ways, linted and validated in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn the_chart_refuses_values_that_would_lose_data_or_cut_a_drain_short() {
    const TEST: &str = "the_chart_refuses_values_that_would_lose_data_or_cut_a_drain_short";
    let Some(venv) = tools(TEST) else { return };
    let error = render(&venv, &json!({"persistence": {"enabled": true}}))
        .err()
        .expect("SQLite on a volume with an autoscaler is refused");
    assert!(
        error.contains("persistence.enabled keeps SQLite on one pod's volume"),
        "{error}"
    );
    let one = render(
        &venv,
        &json!({"persistence": {"enabled": true}, "autoscaling": {"enabled": false}, "replicaCount": 1}),
    )
    .expect("one pod on a volume is fine");
    assert_eq!(
        one.one("PersistentVolumeClaim")["spec"]["accessModes"],
        json!(["ReadWriteOnce"])
    );
    let error = render(&venv, &json!({"terminationGracePeriodSeconds": 30}))
        .err()
        .expect("a grace period below the drain is refused");
    assert!(
        error.contains("terminationGracePeriodSeconds (30) must be above run.drainDelay + run.gracefulTimeout (36)"),
        "{error}"
    );
}

/// Standard base64 with padding, as Helm's `b64enc` writes a Secret's data.
fn base64(text: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = text.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
