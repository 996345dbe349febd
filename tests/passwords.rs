//! Password hashing for route code, computed by the host at native speed (`passwords` in
//! wit/filerouter.wit): the sandbox's own `bcrypt` and `argon2` packages (PyPI bcrypt's and
//! argon2-cffi's APIs) and `hashlib.pbkdf2_hmac` / `hashlib.scrypt`, checked against the real
//! native packages and CPython on this machine; passlib and pwdlib from PyPI, installed with
//! `filerouter packages install`, using them unchanged; and the request's `cpu_ms` stopping a
//! costly hash in the middle.
//!
//! Needs the Python venv of `support::tools` (native bcrypt and argon2-cffi, pip, PyPI): the
//! tests that do are skipped loudly without it, and fail in CI.

use crate::support;

use std::{path::Path, process::Command, time::Duration};

use serde_json::{Value, json};
use support::{
    Project, Server, run,
    tools::{missing, python_venv, run_tool},
};

/// `script` run by the venv's Python (native bcrypt and argon2-cffi), its stdout as JSON.
fn native(venv: &Path, script: &str) -> Value {
    let out = run_tool(Command::new(venv.join("bin/python")).args(["-c", script]))
        .unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn post(server: &Server, path: &str, body: &Value) -> Value {
    let response = server.request("POST", path).json(body).send().unwrap();
    assert_eq!(response.status(), 200, "{}", server.log());
    support::json(response)
}

const PASSWORD: &str = "correct horse battery staple";

/// The FastAPI-with-JWT-login port of the issue: passlib's CryptContext with bcrypt, installed
/// from `passlib[bcrypt]`, verifies a hash made by the native bcrypt package and makes hashes
/// the native package verifies; argon2-cffi's and pwdlib's the same. Neither bcrypt nor
/// argon2-cffi is installed (they are native code): the sandbox's own modules take their place.
#[test]
fn passlib_pwdlib_and_argon2_interoperate_with_the_native_packages() {
    const TEST: &str = "passlib_pwdlib_and_argon2_interoperate_with_the_native_packages";
    let venv = match python_venv() {
        Ok(venv) => venv,
        Err(why) => return missing(TEST, &why, "python3 and python3-venv, and reach PyPI"),
    };
    let project = Project::new(&[
        (
            "requirements.txt",
            "passlib[bcrypt]==1.7.4\npwdlib[argon2,bcrypt]==0.3.1\n",
        ),
        (
            "routes/check/route.py",
            r#"
            import argon2
            import bcrypt
            from passlib.context import CryptContext
            from pwdlib import PasswordHash
            from pwdlib.hashers.argon2 import Argon2Hasher
            from pwdlib.hashers.bcrypt import BcryptHasher

            passlib_bcrypt = CryptContext(schemes=["bcrypt"], deprecated="auto")
            pwdlib_hash = PasswordHash((Argon2Hasher(), BcryptHasher()))

            async def POST(request):
                body = await request.json()
                password = body["password"]
                argon2_hasher = argon2.PasswordHasher()
                try:
                    argon2_hasher.verify(body["argon2"], password + "x")
                    argon2_rejects_wrong = False
                except argon2.exceptions.VerifyMismatchError:
                    argon2_rejects_wrong = True
                return {
                    "passlib_verifies_native": passlib_bcrypt.verify(password, body["bcrypt"]),
                    "passlib_rejects_wrong": not passlib_bcrypt.verify(password + "x", body["bcrypt"]),
                    "passlib_hash": passlib_bcrypt.hash(password),
                    "argon2_verifies_native": argon2_hasher.verify(body["argon2"], password),
                    "argon2_rejects_wrong": argon2_rejects_wrong,
                    "argon2_needs_rehash": argon2_hasher.check_needs_rehash(body["argon2"]),
                    "argon2_hash": argon2_hasher.hash(password),
                    "pwdlib_verifies": [
                        pwdlib_hash.verify(password, body["argon2"]),
                        pwdlib_hash.verify(password, body["bcrypt"]),
                        pwdlib_hash.verify("wrong", body["argon2"]),
                    ],
                    "pwdlib_hash": pwdlib_hash.hash(password),
                    "bcrypt_module": bcrypt.__file__.startswith("/packages"),
                }
            "#,
        ),
    ]);
    let python = venv.join("bin/python");
    let (code, stdout, stderr) = run(
        &[
            "packages",
            "install",
            "--project",
            project.path().to_str().unwrap(),
            "--python",
            python.to_str().unwrap(),
        ],
        project.path(),
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    for (name, module) in [
        ("bcrypt 5.0.0 (", "bcrypt"),
        ("argon2-cffi 25.1.0 (", "argon2"),
    ] {
        let said = format!("): not installed, the sandbox has its own `{module}` module");
        assert!(
            stderr
                .lines()
                .any(|line| line.starts_with(name) && line.contains(&said)),
            "{name}: {stderr}"
        );
    }
    assert!(stdout.contains("passlib 1.7.4"), "{stdout}");
    assert!(stdout.contains("pwdlib 0.3.1"), "{stdout}");
    let packages = project.path().join(".packages");
    for absent in ["bcrypt", "argon2", "_argon2_cffi_bindings", "_cffi_backend"] {
        let found = std::fs::read_dir(&packages)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(absent));
        assert!(!found, "{absent} was installed: {stdout}\n{stderr}");
    }

    let made = native(
        &venv,
        &format!(
            r#"
import json, argon2, bcrypt
print(json.dumps({{
    "bcrypt": bcrypt.hashpw({PASSWORD:?}.encode(), bcrypt.gensalt(12)).decode(),
    "argon2": argon2.PasswordHasher().hash({PASSWORD:?}),
}}))
"#
        ),
    );
    let server = Server::dev(&project);
    let answer = post(
        &server,
        "/check",
        &json!({"password": PASSWORD, "bcrypt": made["bcrypt"], "argon2": made["argon2"]}),
    );
    for key in [
        "passlib_verifies_native",
        "passlib_rejects_wrong",
        "argon2_verifies_native",
        "argon2_rejects_wrong",
    ] {
        assert_eq!(answer[key], true, "{key}: {answer}");
    }
    assert_eq!(answer["argon2_needs_rehash"], false, "{answer}");
    assert_eq!(
        answer["pwdlib_verifies"],
        json!([true, true, false]),
        "{answer}"
    );
    assert_eq!(answer["bcrypt_module"], false);
    let passlib_hash = answer["passlib_hash"].as_str().unwrap();
    assert!(passlib_hash.starts_with("$2b$12$"), "{passlib_hash}");
    assert!(
        answer["argon2_hash"]
            .as_str()
            .unwrap()
            .starts_with("$argon2id$v=19$m=65536,t=3,p=4$"),
        "{answer}"
    );

    // And the reverse: what the sandbox made, the native packages verify.
    let checked = native(
        &venv,
        &format!(
            r#"
import json, argon2, bcrypt
ph = argon2.PasswordHasher()
print(json.dumps([
    bcrypt.checkpw({PASSWORD:?}.encode(), {passlib:?}.encode()),
    bcrypt.checkpw(b"wrong", {passlib:?}.encode()),
    ph.verify({argon:?}, {PASSWORD:?}),
    ph.verify({pwdlib:?}, {PASSWORD:?}),
]))
"#,
            passlib = passlib_hash,
            argon = answer["argon2_hash"].as_str().unwrap(),
            pwdlib = answer["pwdlib_hash"].as_str().unwrap(),
        ),
    );
    assert_eq!(checked, json!([true, false, true, true]));
}

/// What the route below computes, as Python: run in the sandbox and by CPython on this machine
/// with the native bcrypt and argon2-cffi, the two must give the same bytes and the same
/// exception types.
const SAME_EVERYWHERE: &str = r#"
import hashlib
import bcrypt
import argon2
from argon2.low_level import Type, hash_secret, hash_secret_raw, verify_secret


def error(call):
    try:
        call()
    except Exception as e:
        return type(e).__name__
    return None


def compute():
    pbkdf2 = [
        hashlib.pbkdf2_hmac(name, password, salt, iterations, dklen).hex()
        for name, password, salt, iterations, dklen in [
            ("sha256", b"password", b"salt", 1, None),
            ("sha256", b"password", b"salt", 600000, None),
            ("sha1", b"password", b"salt", 4096, 20),
            ("sha512", b"pass\0word", b"sa\0lt", 1000, 100),
            ("sha224", b"", b"", 10, 7),
            ("sha384", b"p" * 200, b"s" * 100, 3, 48),
            ("md5", b"password", b"salt", 100, None),
            ("sha3_256", b"password", b"salt", 100, 40),
            ("sha512_256", b"password", b"salt", 100, None),
            ("SHA256", bytearray(b"password"), memoryview(b"salt"), 2, 65),
        ]
    ]
    scrypt = [
        hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, dklen=dklen).hex()
        for password, salt, n, r, p, dklen in [
            (b"", b"", 16, 1, 1, 64),
            (b"password", b"NaCl", 1024, 8, 16, 64),
            (b"pleaseletmein", b"SodiumChloride", 16384, 8, 1, 64),
            (b"p", b"s", 2, 1, 3, 7),
        ]
    ]
    errors = [
        error(lambda: hashlib.pbkdf2_hmac("nope", b"p", b"s", 1)),
        error(lambda: hashlib.pbkdf2_hmac("sha256", "text", b"s", 1)),
        error(lambda: hashlib.pbkdf2_hmac("sha256", b"p", 5, 1)),
        error(lambda: hashlib.pbkdf2_hmac("sha256", b"p", b"s", 0)),
        error(lambda: hashlib.pbkdf2_hmac("sha256", b"p", b"s", 2**31)),
        error(lambda: hashlib.pbkdf2_hmac("sha256", b"p", b"s", 1.5)),
        error(lambda: hashlib.pbkdf2_hmac("sha256", b"p", b"s", 1, 0)),
        error(lambda: hashlib.pbkdf2_hmac("sha256", b"p", b"s", 1, 2**31)),
        error(lambda: hashlib.scrypt(b"p", salt=b"s", n=3, r=8, p=1)),
        error(lambda: hashlib.scrypt(b"p", salt=b"s", n=1, r=8, p=1)),
        error(lambda: hashlib.scrypt(b"p", salt=b"s", n=16, r=0, p=1)),
        error(lambda: hashlib.scrypt(b"p", salt=b"s", n=16, r=8, p=1, maxmem=-1)),
        error(lambda: hashlib.scrypt(b"p", salt=b"s", n=16, r=8, p=1, dklen=0)),
        error(lambda: hashlib.scrypt(b"p", salt=b"s", n=2**15, r=8, p=1)),
        error(lambda: hashlib.scrypt("text", salt=b"s", n=16, r=8, p=1)),
        error(lambda: hashlib.scrypt(b"p", n=16, r=8, p=1)),
        error(lambda: bcrypt.gensalt(3)),
        error(lambda: bcrypt.gensalt(32)),
        error(lambda: bcrypt.gensalt(prefix=b"2y")),
        error(lambda: bcrypt.hashpw(b"p", b"$2b$12$tooshort")),
        error(lambda: bcrypt.hashpw(b"p", b"$2b$03$" + b"." * 22)),
        error(lambda: bcrypt.hashpw("text", bcrypt.gensalt(4))),
        error(lambda: bcrypt.checkpw(b"p", b"not a hash")),
        error(lambda: bcrypt.kdf(b"", b"salt", 32, 50)),
        error(lambda: bcrypt.kdf(b"p", b"salt", 513, 50)),
        error(lambda: bcrypt.kdf(b"p", b"salt", 32, 0)),
        error(lambda: hash_secret_raw(b"p", b"short", 1, 64, 1, 32, Type.ID)),
        error(lambda: hash_secret_raw(b"p", b"somesalt", 0, 64, 1, 32, Type.ID)),
        error(lambda: hash_secret_raw(b"p", b"somesalt", 1, 7, 1, 32, Type.ID)),
        error(lambda: hash_secret_raw(b"p", b"somesalt", 1, 64, 1, 3, Type.ID)),
        error(lambda: verify_secret(b"$argon2id$v=19$m=64,t=1,p=1$garbage", b"p", Type.ID)),
        error(lambda: verify_secret(hash_secret(b"p", b"somesalt", 1, 64, 1, 16, Type.I), b"q", Type.I)),
        error(lambda: argon2.PasswordHasher().verify("$2b$12$nope", "p")),
        error(lambda: argon2.PasswordHasher(time_cost="3")),
    ]
    known = bcrypt.hashpw(b"x", b"$2b$06$R1lJ2gkNaoPGdafE.H.16.").decode()
    return {
        "pbkdf2": pbkdf2,
        "scrypt": scrypt,
        "errors": errors,
        "bcrypt": [
            bcrypt.hashpw(password, b"$2b$06$R1lJ2gkNaoPGdafE.H.16.").decode()
            for password in [b"", b"x", b"\xd1\x91", b"p" * 72, bytes(range(1, 72))]
        ]
        + [bcrypt.hashpw(b"x", b"$2a$05$R1lJ2gkNaoPGdafE.H.16.").decode(), bcrypt.hashpw(b"x", known.encode()).decode()],
        "bcrypt_checks": [bcrypt.checkpw(b"x", known.encode()), bcrypt.checkpw(b"y", known.encode())],
        "kdf": [
            bcrypt.kdf(b"password", b"salt", 64, 50).hex(),
            bcrypt.kdf(b"p\0w", b"s", 33, 51).hex(),
            bcrypt.kdf(b"p" * 100, b"s" * 100, 512, 50).hex(),
        ],
        "argon2": [
            hash_secret_raw(b"secret", b"somesalt", 2, 256, 2, 24, kind, version).hex()
            for kind in (Type.D, Type.I, Type.ID)
            for version in (16, 19)
        ]
        + [hash_secret(b"secret", b"somesaltsomesalt", 1, 1024, 4, 32, Type.ID).decode()],
    }
"#;

/// `hashlib.pbkdf2_hmac` and `hashlib.scrypt`, bcrypt's `hashpw`, `checkpw` and `kdf`, and
/// Argon2's raw and encoded hashes give the same bytes as CPython with the native packages on
/// this machine, and bad parameters raise the same exception types. Served by `run` from a
/// build, so the modules come from the snapshot.
#[test]
fn hashes_and_errors_match_cpython_and_the_native_packages() {
    const TEST: &str = "hashes_and_errors_match_cpython_and_the_native_packages";
    let venv = match python_venv() {
        Ok(venv) => venv,
        Err(why) => return missing(TEST, &why, "python3 and python3-venv, and reach PyPI"),
    };
    let route = format!("{SAME_EVERYWHERE}\n\ndef GET(request):\n    return compute()\n");
    let project = Project::new(&[("routes/same/route.py", route.as_str())]);
    let expected = native(
        &venv,
        &format!("{SAME_EVERYWHERE}\nimport json\nprint(json.dumps(compute()))\n"),
    );
    let (code, _, stderr) = run(&["build", "--project", "."], project.path());
    assert_eq!(code, 0, "{stderr}");
    let server = Server::run(&project, &[]);
    let response = server.get("/same");
    assert_eq!(response.status(), 200, "{}", server.log());
    let got = support::json(response);
    for key in [
        "pbkdf2",
        "scrypt",
        "errors",
        "bcrypt",
        "bcrypt_checks",
        "kdf",
        "argon2",
    ] {
        assert_eq!(got[key], expected[key], "{key}");
    }
    // The errors are the originals' (UnsupportedDigestmodError is a ValueError, ...).
    assert_eq!(got["errors"][0], "UnsupportedDigestmodError");
    assert_eq!(got["errors"][13], "ValueError");
    assert_eq!(got["errors"][26], "HashingError");
    assert_eq!(got["errors"][31], "VerifyMismatchError");
}

/// A costly hash is the request's CPU: bcrypt at cost 16 (seconds of CPU) and PBKDF2 with a
/// billion iterations under `cpu_ms` 300 answer 504 soon after 300 ms of CPU, stopped in the
/// middle of the host's computation, and the server goes on serving. Argon2, which the host
/// computes in one step, is refused past the request's memory limit and the work bound.
#[test]
fn a_costly_hash_is_stopped_at_the_cpu_limit() {
    let project = Project::new(&[
        (
            "config.py",
            "sandbox = {'cpu_ms': 300, 'wall_s': 60, 'memory_mb': 64}\n",
        ),
        (
            "routes/slow/route.py",
            "import bcrypt\n\ndef GET(request):\n    return {'hash': bcrypt.hashpw(b'x', bcrypt.gensalt(16)).decode()}\n",
        ),
        (
            "routes/iterations/route.py",
            "import hashlib\n\ndef GET(request):\n    return {'key': hashlib.pbkdf2_hmac('sha256', b'x', b'salt', 10**9).hex()}\n",
        ),
        (
            "routes/bounds/route.py",
            r#"
from argon2.exceptions import HashingError
from argon2.low_level import Type, hash_secret_raw


def GET(request):
    refused = []
    # Over the request's memory limit (memory_mb, 64 MiB here), then over the work bound.
    for t, m in [(1, 65 * 1024), (64, 65536)]:
        try:
            hash_secret_raw(b"p", b"somesalt", t, m, 1, 32, Type.ID)
        except HashingError as e:
            refused.append(str(e))
    return {"refused": refused}
"#,
        ),
        (
            "routes/fast/route.py",
            "import bcrypt\n\ndef GET(request):\n    return {'ok': bcrypt.checkpw(b'x', bcrypt.hashpw(b'x', bcrypt.gensalt(4)))}\n",
        ),
    ]);
    let server = Server::dev(&project);
    assert_eq!(server.get("/fast").status(), 200, "{}", server.log());
    for path in ["/slow", "/iterations", "/slow"] {
        let before = support::process_cpu(server.pid());
        let response = server.get(path);
        let burnt = support::process_cpu(server.pid()) - before;
        assert_eq!(response.status(), 504, "{path}: {}", server.log());
        // Cost 16 is about 4 s of CPU natively: stopped in the middle, not after. Counted in
        // the server's CPU, which a busy machine does not stretch as it does wall time.
        assert!(
            burnt < Duration::from_millis(2000),
            "{path} burnt {burnt:?} of CPU"
        );
        let response = server.get("/fast");
        assert_eq!(response.status(), 200, "{}", server.log());
        assert_eq!(support::json(response), json!({"ok": true}));
    }
    assert!(server.log_shows("CPU time"), "{}", server.log());
    // Argon2 cannot be stopped in the middle: its memory and work are bounded before it starts.
    let refused = support::json(server.get("/bounds"));
    let refused = refused["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(
        refused[0].as_str().unwrap().contains("memory_mb"),
        "{refused:?}"
    );
    assert!(
        refused[1]
            .as_str()
            .unwrap()
            .starts_with("Time cost is too large"),
        "{refused:?}"
    );
}
