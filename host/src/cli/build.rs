//! `filerouter build`: scan, import and snapshot the project once, and write the build cache.
//!
//! Steps: evaluate `config.py`, load and check the plugins, and inspect every route file in
//! the sandbox (as `dev` does);
//! stop with the file and line if anything fails; bake the route modules into the guest
//! ([`snapshot`]); split the snapshot's memory image from its code, which must be the built-in
//! guest's, compiled once per machine and shared by every project ([`image`]): a build
//! compiles no native code (the plugins' is compiled already); compress, seal and write
//! `.cache/` with the plugins in a section of their own ([`cache`]). Nothing is written unless
//! every step succeeded.
//!
//! [`snapshot`]: crate::sandbox::snapshot
//! [`image`]: crate::sandbox::image
//! [`cache`]: crate::cache

use std::{
    fs,
    path::Path,
    sync::Arc,
    time::{Instant, SystemTime},
};

use anyhow::{Context, bail};

use super::BuildArgs;
use crate::{
    cache::{self, CacheKey, CachedRoute, Contents, Manifest, Metadata, RouteCounts, seal},
    config::Settings,
    logging,
    mode::Mode,
    packages,
    project::{Project, RootFiles},
    regular_file,
    sandbox::{self, Limits, Sandbox, engine::SandboxEngine, image, snapshot},
};

pub fn run(args: BuildArgs) -> anyhow::Result<()> {
    super::runtime()?.block_on(build(args))
}

async fn build(args: BuildArgs) -> anyhow::Result<()> {
    logging::init(Mode::Production, None);
    let root = args
        .project
        .canonicalize()
        .with_context(|| format!("project folder {} not found", args.project.display()))?;
    let routes_dir = Project::routes_dir(&root);
    if !routes_dir.is_dir() {
        bail!("{} has no routes/ folder", root.display());
    }
    // A bad key is reported before any work is done.
    let key = if args.encrypt {
        match CacheKey::from_env()? {
            Some(key) => Some(key),
            None => bail!(
                "--encrypt needs the key in {}: 64 hexadecimal characters (for example from `openssl rand -hex 32`)",
                seal::KEY_VAR
            ),
        }
    } else {
        None
    };

    let started = Instant::now();
    let step = Instant::now();
    let engine = tokio::task::spawn_blocking(|| SandboxEngine::load(4))
        .await
        .context("engine setup panicked")??;
    let scheduler = crate::scheduler::Scheduler::new(4);
    let boot = Sandbox::new(
        engine,
        Some(&routes_dir),
        Limits::default(),
        scheduler.tooling(),
    )?;
    let settings = boot.load_settings(&root).await?;
    let level = args
        .compression
        .map(i32::from)
        .or(settings.build.compression_level.map(i32::from))
        .unwrap_or(6);
    if !(1..=9).contains(&level) {
        bail!("compression level {level} is out of range: use 1 to 9");
    }
    let cache_dir = settings.build.cache_dir(&root);
    let plugins = crate::plugins::load_in_background(&root, &settings.plugins).await?;
    // The build sees what config.py declares for route code, never a value: the cache holds none.
    let sandbox = boot
        .with_limits(settings.limits())
        .with_plugins(plugins.clone())
        .with_environment(settings.declared_environment());
    let sources = Sources::read(&root)?;
    let inputs = sources.inputs_hash(&root, level, key.is_some(), &settings)?;
    let Sources {
        files,
        packages,
        migrations,
        alembic,
    } = sources;
    // Before any route is inspected: an up-to-date build (a test session's `mode="run"`
    // client asks at every start) costs the time of reading the sources.
    if !args.force && up_to_date(&cache_dir, key.as_ref(), &inputs).await? {
        eprintln!(
            "{} is up to date (use --force to build it again)",
            cache_dir.display()
        );
        note_public(&root, &cache_dir);
        return Ok(());
    }
    let project = Project::load(&root, &sandbox, None, None).await;
    check(&project)?;
    // The Alembic history's heads, which `run` checks its database against.
    let alembic_heads = match &alembic {
        Some(history) => Some(
            crate::alembic::heads(&sandbox, history)
                .await
                .map_err(|e| anyhow::anyhow!("{}: {e}", crate::alembic::FOLDER))?,
        ),
        None => None,
    };
    eprintln!(
        "[1/4] config.py and routes/: {} route files inspected ({:.1}s)",
        project.routes.len(),
        step.elapsed().as_secs_f64()
    );

    let step = Instant::now();
    eprintln!(
        "[2/4] importing every route{} in the sandbox and snapshotting it...",
        if packages.is_empty() {
            String::new()
        } else {
            format!(" and the {} files of .packages/", packages.len())
        }
    );
    let route_files: Vec<String> = project.routes.iter().map(|r| r.file.clone()).collect();
    let root_files = project.root_files.to_bake();
    let baked = snapshot::bake(
        files,
        route_files,
        root_files,
        packages,
        settings.limits().memory_bytes,
        Some(Arc::new(plugins.clone())),
        settings.declared_environment(),
    )
    .await
    .map_err(|e| match e {
        snapshot::BakeError::Project(error) => anyhow::anyhow!(
            "{}:{}: {}: {}",
            error.file.as_deref().unwrap_or("routes/"),
            error.line.unwrap_or(0),
            error.kind,
            error.message
        ),
        other => anyhow::anyhow!(other),
    })?;
    eprintln!("      done ({:.1}s)", step.elapsed().as_secs_f64());

    let step = Instant::now();
    eprintln!("[3/4] taking the snapshot's memory image (the code is shared)...");
    let image = tokio::task::spawn_blocking(move || memory_image(&baked))
        .await
        .context("splitting the snapshot panicked")??;
    let sealed = seal_plugins(&root, &plugins)?;
    eprintln!("      done ({:.1}s)", step.elapsed().as_secs_f64());

    let step = Instant::now();
    eprintln!(
        "[4/4] compressing (zstd level {level}) and writing {}...",
        cache_dir.display()
    );
    let metadata = Metadata {
        settings,
        routes: project
            .routes
            .iter()
            .map(|r| CachedRoute {
                file: r.file.clone(),
                pattern: r.pattern.clone(),
                handlers: r.handlers.clone().unwrap_or_default(),
                trailing_slash: r.trailing_slash,
            })
            .collect(),
        root_files: project.root_files.names().to_vec(),
        migrations,
        alembic_heads,
    };
    let manifest = Manifest {
        format: seal::FORMAT,
        filerouter_version: env!("CARGO_PKG_VERSION").to_string(),
        guest_sha256: sandbox::GUEST_SHA256.to_string(),
        created_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        compression_level: level,
        encrypted: key.is_some(),
        inputs,
        routes: counts(&metadata.routes),
        sections: Vec::new(),
        plugins: plugins.names().map(String::from).collect(),
    };
    let contents = Contents {
        metadata,
        image,
        plugins: sealed,
    };
    let written = tokio::task::spawn_blocking(move || {
        cache::write(&cache_dir, &contents, manifest, level, key.as_ref()).map(|m| (m, cache_dir))
    })
    .await
    .context("writing the cache panicked")?;
    let (manifest, cache_dir) = written?;
    eprintln!("      done ({:.1}s)", step.elapsed().as_secs_f64());

    let raw: u64 = manifest.sections.iter().map(|s| s.raw).sum();
    let packed: u64 = manifest.sections.iter().map(|s| s.compressed).sum();
    println!(
        "built {}: {} routes ({} handlers) in {:.1}s; {} -> {} ({:.0}% smaller){}",
        cache_dir.display(),
        manifest.routes.files,
        manifest.routes.handlers,
        started.elapsed().as_secs_f64(),
        megabytes(raw),
        megabytes(packed),
        100.0 * (1.0 - packed as f64 / raw.max(1) as f64),
        if manifest.encrypted {
            ", encrypted"
        } else {
            ""
        }
    );
    note_public(&root, &cache_dir);
    Ok(())
}

/// The inputs hash a build of the project at `root` would record now, at compression `level`
/// and encrypted or not: what `filerouter status` compares with the build's. Evaluates
/// `config.py` in the sandbox (its plugins and build settings count); reads every source.
pub async fn current_inputs(root: &Path, level: i32, encrypted: bool) -> anyhow::Result<String> {
    let engine = tokio::task::spawn_blocking(|| SandboxEngine::load(1))
        .await
        .context("engine setup panicked")??;
    let scheduler = crate::scheduler::Scheduler::new(1);
    let boot = Sandbox::new(engine, None, Limits::default(), scheduler.tooling())?;
    let settings = boot.load_settings(root).await?;
    let root = root.to_path_buf();
    tokio::task::spawn_blocking(move || {
        Sources::read(&root)?.inputs_hash(&root, level, encrypted, &settings)
    })
    .await
    .context("reading the sources panicked")?
}

/// The memory image of the baked component `baked`, once its code has been checked to be the
/// built-in guest's, which every project shares: a snapshot that changed anything else (a
/// global's starting value, a function) is refused, naming the difference.
fn memory_image(baked: &[u8]) -> anyhow::Result<Vec<u8>> {
    let snapshot = image::split(baked)?;
    let builtin = image::split(&sandbox::guest_wasm().map_err(anyhow::Error::msg)?)?;
    let differences = snapshot.differences(&builtin);
    if !differences.is_empty() {
        bail!(
            "the snapshot changed the guest's code, which every project shares, not only its memory: {}",
            differences.join("; ")
        );
    }
    // `run` on this machine maps it from the cache folder at once.
    image::keep(&snapshot.image);
    Ok(snapshot.image)
}

/// After a build: if `public/` holds files `run` would serve, say that they are not in the
/// cache, so a deploy that copies only the cache folder loses them. Nothing is said when
/// `public/` is absent, empty, holds only names `run` never serves (`.gitkeep`), or cannot be
/// read.
fn note_public(root: &Path, cache_dir: &Path) {
    let Some((files, bytes)) = public_files(&root.join("public")) else {
        return;
    };
    let cache = cache_dir.strip_prefix(root).map_or_else(
        |_| cache_dir.display().to_string(),
        |rel| rel.display().to_string(),
    );
    eprintln!(
        "note: public/ ({files} file{}, {}) is not in {cache}/: `filerouter run` serves it from the project folder, so deploy public/ beside {cache}/ (the Dockerfile does)",
        if files == 1 { "" } else { "s" },
        size(bytes)
    );
}

/// The files under `public` that `run` may serve, as (how many, their bytes): regular files,
/// and links to files, whose path has no name starting with `.` (never served). `None` when
/// there are none, or when a folder of it cannot be read. Links to folders are not followed.
fn public_files(public: &Path) -> Option<(u64, u64)> {
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut stack = vec![public.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).ok()? {
            let entry = entry.ok()?;
            if entry.file_name().as_encoded_bytes().starts_with(b".") {
                continue;
            }
            let kind = entry.file_type().ok()?;
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() || kind.is_symlink() {
                // A link counts when it leads to a file; one that leads nowhere is skipped.
                if let Ok(meta) = fs::metadata(entry.path())
                    && meta.is_file()
                {
                    files += 1;
                    bytes += meta.len();
                }
            }
        }
    }
    (files > 0).then_some((files, bytes))
}

/// `bytes` for a person: bytes below one KiB, KiB below one MiB, else MiB (one decimal).
fn size(bytes: u64) -> String {
    if bytes < 1024 {
        format!("{bytes} bytes")
    } else if bytes < 1024 * 1024 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
    }
}

/// Whether the cache in `cache_dir` was built from `inputs` and is one that `run` would serve:
/// the sealed bundle itself is opened and verified with `key` (its checksum, or its
/// authentication tag), never just the readable `manifest.json` beside it. A damaged bundle,
/// or one sealed with another key, is reported and built again.
async fn up_to_date(
    cache_dir: &Path,
    key: Option<&CacheKey>,
    inputs: &str,
) -> anyhow::Result<bool> {
    let (dir, key) = (cache_dir.to_path_buf(), key.cloned());
    let opened = tokio::task::spawn_blocking(move || cache::open(&dir, key.as_ref()))
        .await
        .context("reading the old cache panicked")?;
    Ok(match opened {
        Ok(existing) => existing.manifest.inputs == inputs,
        Err(cache::CacheError::Missing(_)) => false,
        Err(e) => {
            eprintln!(
                "{}: the old cache is not reused ({e}); building it again",
                cache_dir.display()
            );
            false
        }
    })
}

/// Refuse to build a project with scan errors or route files that fail to import.
fn check(project: &Project) -> anyhow::Result<()> {
    let mut problems: Vec<String> = project.scan_errors.iter().map(|e| e.to_string()).collect();
    for route in &project.routes {
        if let Err(error) = &route.handlers {
            problems.push(format!(
                "{}:{}: {}: {}",
                error
                    .file
                    .clone()
                    .unwrap_or_else(|| format!("routes/{}", route.file)),
                error.line.unwrap_or(0),
                error.kind,
                error.message
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        bail!(
            "the build stopped; nothing was written:\n  {}",
            problems.join("\n  ")
        )
    }
}

/// The `plugins` section: each plugin's component (read again from its file) and the native
/// code already compiled for it.
fn seal_plugins(root: &Path, plugins: &crate::plugins::Plugins) -> anyhow::Result<Vec<u8>> {
    if plugins.is_empty() {
        return Ok(Vec::new());
    }
    let mut sealed = Vec::new();
    for plugin in plugins.iter() {
        let source = crate::plugins::Source::read(root, &plugin.name, &plugin.settings)?;
        let native = plugin
            .component
            .serialize()
            .map_err(|e| anyhow::anyhow!("plugin `{}`: {e:#}", plugin.name))?;
        sealed.push(crate::plugins::sealed::SealedPlugin {
            name: plugin.name.clone(),
            exports: plugin.exports.clone(),
            wasm: source.wasm,
            native,
        });
    }
    Ok(crate::plugins::sealed::encode(&sealed))
}

/// What a build reads besides `config.py`, the root files and the plugins.
struct Sources {
    /// `routes/` files, as (path, source).
    files: Vec<(String, String)>,
    /// `.packages/` files, as (path, bytes).
    packages: Vec<(String, Vec<u8>)>,
    migrations: Vec<crate::db::migrations::Migration>,
    /// `alembic.ini` and `alembic/`, when the project keeps an Alembic history.
    alembic: Option<crate::alembic::History>,
}

impl Sources {
    /// Read them from the project at `root`. Blocking.
    fn read(root: &Path) -> anyhow::Result<Sources> {
        Ok(Sources {
            files: crate::project::route_sources(&Project::routes_dir(root))?,
            packages: packages::files(root)?,
            migrations: crate::db::migrations::read(root)?,
            alembic: crate::alembic::History::read(root)?,
        })
    }

    /// The hash of everything a build depends on, as its manifest records it (`inputs`): the
    /// version, the guest, the compression `level`, `encrypted`, `config.py`, the root files,
    /// the plugins `settings` name, and these sources.
    fn inputs_hash(
        &self,
        root: &Path,
        level: i32,
        encrypted: bool,
        settings: &Settings,
    ) -> anyhow::Result<String> {
        let Sources {
            files,
            packages,
            migrations,
            alembic,
        } = self;
        let mut hasher = blake3::Hasher::new();
        hasher.update(env!("CARGO_PKG_VERSION").as_bytes());
        hasher.update(sandbox::GUEST_SHA256.as_bytes());
        hasher.update(&level.to_le_bytes());
        hasher.update(&[u8::from(encrypted)]);
        // An absent file hashes as empty; one that cannot be read stops the build (it was read
        // already, so it changed meanwhile).
        let read = |path: &Path| match regular_file::read(path, regular_file::MAX_SOURCE_BYTES) {
            Err(regular_file::FileError::NotFound(_)) => Ok(Vec::new()),
            other => other,
        };
        hasher.update(&read(&root.join("config.py"))?);
        for name in RootFiles::NAMES {
            hasher.update(name.as_bytes());
            hasher.update(&read(&root.join(name))?);
        }
        // Each plugin's component and WIT files, read as loading it read them.
        for (name, entry) in &settings.plugins {
            hasher.update(name.as_bytes());
            for (path, bytes) in crate::plugins::input_files(root, name, entry)? {
                hasher.update(&(path.len() as u64).to_le_bytes());
                hasher.update(path.as_bytes());
                hasher.update(&(bytes.len() as u64).to_le_bytes());
                hasher.update(&bytes);
            }
        }
        for migration in migrations {
            for part in [&migration.name, &migration.sql] {
                hasher.update(&(part.len() as u64).to_le_bytes());
                hasher.update(part.as_bytes());
            }
        }
        for (path, bytes) in alembic.iter().flat_map(|h| h.files()) {
            hasher.update(&(path.len() as u64).to_le_bytes());
            hasher.update(path.as_bytes());
            hasher.update(&(bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        }
        for (path, source) in files {
            hasher.update(&(path.len() as u64).to_le_bytes());
            hasher.update(path.as_bytes());
            hasher.update(&(source.len() as u64).to_le_bytes());
            hasher.update(source.as_bytes());
        }
        for (path, bytes) in packages {
            hasher.update(&(path.len() as u64).to_le_bytes());
            hasher.update(path.as_bytes());
            hasher.update(&(bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        }
        Ok(hasher.finalize().to_hex().to_string())
    }
}

/// Statistics as DECISIONS.md counts them: one per path and method.
fn counts(routes: &[CachedRoute]) -> RouteCounts {
    let mut counts = RouteCounts {
        files: routes.len(),
        ..RouteCounts::default()
    };
    for route in routes {
        let dynamic = route.pattern.0.iter().any(|s| s.param_name().is_some());
        let n = route.handlers.len();
        counts.handlers += n;
        if dynamic {
            counts.dynamic_routes += n;
        } else {
            counts.static_routes += n;
        }
    }
    counts
}

pub fn megabytes(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1_000_000.0)
}
