//! The read phase of a load: every input file's bytes, read into memory and hashed into the
//! revision. Parsing happens later, from memory, so a reload can skip content it has already
//! seen and can tell a set that changed while it was being read. An entry named like a source
//! that is not a readable regular file (or a symlink to one) is a problem naming it, never
//! skipped: skipping a policy file would drop its forbids.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::attributes::ATTRIBUTES_FILE;
use super::diag::Problem;
use super::schema_gen::SCHEMA_FILE;

/// File name of the entities file inside the policies directory.
pub const ENTITIES_FILE: &str = "entities.json";

/// One input file as read.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its contents.
    pub text: String,
}

/// Every input of a policy snapshot, read at one moment.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// `schemas/tools/*.json`, sorted.
    pub manifests: Vec<SourceFile>,
    /// `schemas/toolgate.cedarschema`.
    pub schema: Option<SourceFile>,
    /// `schemas/attributes.json`, when there is one.
    pub attributes: Option<SourceFile>,
    /// `policies/*.cedar`, sorted.
    pub policies: Vec<SourceFile>,
    /// `policies/entities.json`.
    pub entities: Option<SourceFile>,
    /// Files or directories that could not be read.
    pub problems: Vec<Problem>,
    /// `sha256:` + 16 hex digits over every file's role, name and bytes.
    pub revision: String,
    /// The allowlist of executables manifests are checked against.
    pub programs: crate::tools::Programs,
    /// The deny list path facts are matched against.
    pub deny: std::sync::Arc<crate::globs::PathGuard>,
}

/// Where the loader reads from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sources {
    /// Directory of `*.cedar` files and `entities.json`.
    pub policies_dir: PathBuf,
    /// Directory of the Cedar schema and `tools/*.json` manifests.
    pub schemas_dir: PathBuf,
    /// Executables a manifest's `executor` may name (`[exec] programs`).
    pub programs: crate::tools::Programs,
    /// The deny list (`[exec] deny`): policies see whether a path matches it
    /// (`context.paths.<arg>.denied`), with the matcher execution uses.
    pub deny: std::sync::Arc<crate::globs::PathGuard>,
}

impl Sources {
    /// The two directories, with the default allowlist of executables.
    pub fn new(policies_dir: impl Into<PathBuf>, schemas_dir: impl Into<PathBuf>) -> Self {
        Sources {
            policies_dir: policies_dir.into(),
            schemas_dir: schemas_dir.into(),
            programs: crate::tools::Programs::default(),
            deny: std::sync::Arc::default(),
        }
    }
}

/// Reads every input once.
pub fn read_inputs(sources: &Sources) -> Inputs {
    let mut problems = Vec::new();
    let mut hasher = Sha256::new();
    let manifests = read_all(
        &sources.schemas_dir.join("tools"),
        "json",
        "tool",
        &mut hasher,
        &mut problems,
    );
    let schema = read_one(
        &sources.schemas_dir.join(SCHEMA_FILE),
        "schema",
        &mut hasher,
        &mut problems,
    );
    let attributes_path = sources.schemas_dir.join(ATTRIBUTES_FILE);
    // Optional: absent means no declared attributes; anything named like it must be readable.
    let attributes = fs::symlink_metadata(&attributes_path)
        .is_ok()
        .then(|| read_one(&attributes_path, "attributes", &mut hasher, &mut problems))
        .flatten();
    let policies = read_all(
        &sources.policies_dir,
        "cedar",
        "policy",
        &mut hasher,
        &mut problems,
    );
    // Judged here, where the listing is known to have succeeded: an empty but readable
    // directory is an error whatever else was found (warnings included).
    if policies.is_empty() && sources.policies_dir.is_dir() {
        problems.push(Problem::in_file(
            &sources.policies_dir,
            "no `.cedar` files: every call would be denied",
            Some("add policies, or point `policies_dir` at the right directory".to_owned()),
        ));
    }
    let entities = read_one(
        &sources.policies_dir.join(ENTITIES_FILE),
        "entities",
        &mut hasher,
        &mut problems,
    );
    // Nobody but root, toolgate's user and the directories' owners may have changed them.
    let dirs = [&sources.policies_dir, &sources.schemas_dir].map(|d| {
        (
            d.canonicalize().unwrap_or_else(|_| d.clone()),
            crate::owners::Kind::Read,
        )
    });
    for f in crate::owners::check(&dirs, crate::owners::Users::current(None), false) {
        problems.push(Problem::in_file(&f.path, f.message, Some(f.help)));
    }
    for p in &problems {
        hasher.update(p.message.as_bytes());
    }
    let digest = hex::encode(hasher.finalize());
    Inputs {
        manifests,
        schema,
        attributes,
        policies,
        entities,
        problems,
        revision: format!("sha256:{}", digest.get(..16).unwrap_or(&digest)),
        programs: sources.programs.clone(),
        deny: sources.deny.clone(),
    }
}

/// Reads at most this many times waiting for two reads to agree.
const STABLE_ATTEMPTS: usize = 5;
/// Pause between those reads.
const STABLE_PAUSE: Duration = Duration::from_millis(20);

/// Reads until two consecutive reads agree (at most 5 reads, 20 ms apart), so a set swapped
/// while it was being read (a ConfigMap `..data` flip between two files) is not taken as a mix
/// of old and new files.
pub fn read_stable(sources: &Sources) -> Inputs {
    let mut last = read_inputs(sources);
    for _ in 1..STABLE_ATTEMPTS {
        let next = read_inputs(sources);
        if next.revision == last.revision {
            return next;
        }
        std::thread::sleep(STABLE_PAUSE);
        last = next;
    }
    last
}

/// A cheap summary of the inputs' metadata (path, size, modification time and inode of every
/// input file, symlinks followed): equal fingerprints mean a poll can skip reading contents.
pub fn fingerprint(sources: &Sources) -> [u8; 32] {
    let mut h = Sha256::new();
    let dirs = [
        (sources.schemas_dir.join("tools"), "json"),
        (sources.policies_dir.clone(), "cedar"),
    ];
    let singles = [
        sources.schemas_dir.join(SCHEMA_FILE),
        sources.schemas_dir.join(ATTRIBUTES_FILE),
        sources.policies_dir.join(ENTITIES_FILE),
    ];
    let mut paths: Vec<PathBuf> = singles.to_vec();
    for (dir, ext) in &dirs {
        match list(dir, ext) {
            Ok(found) => paths.extend(found),
            Err(e) => h.update(e.to_string().as_bytes()),
        }
    }
    for p in paths {
        h.update(p.as_os_str().as_encoded_bytes());
        match fs::metadata(&p) {
            Ok(m) => {
                h.update(m.len().to_le_bytes());
                if let Ok(t) = m.modified().and_then(|t| {
                    t.duration_since(std::time::UNIX_EPOCH)
                        .map_err(std::io::Error::other)
                }) {
                    h.update(t.as_nanos().to_le_bytes());
                }
                #[cfg(unix)]
                h.update(std::os::unix::fs::MetadataExt::ino(&m).to_le_bytes());
            }
            Err(_) => h.update([0xff]),
        }
    }
    h.finalize().into()
}

/// Reads only the manifests (for `toolgate schema`).
pub fn read_manifests(schemas_dir: &Path) -> (Vec<SourceFile>, Vec<Problem>) {
    let mut problems = Vec::new();
    let files = read_all(
        &schemas_dir.join("tools"),
        "json",
        "tool",
        &mut Sha256::new(),
        &mut problems,
    );
    (files, problems)
}

/// The source entries in `dir`: every entry named `*.ext`, whatever its type, sorted. The one
/// listing that reads and fingerprints share, so a poll and a read always agree on what the
/// inputs are. A name is what makes an entry a source: an entry named like one that is not a
/// readable regular file (a dangling symlink, a directory, a FIFO) is reported by the read,
/// never skipped, since skipping a policy file removes its forbids.
fn list(dir: &Path, ext: &str) -> std::io::Result<Vec<PathBuf>> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    paths.sort();
    Ok(paths)
}

/// Why a source entry cannot be read as a regular file.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A symlink whose target does not exist.
    #[error("is a symlink to `{0}`, which does not exist")]
    Dangling(String),
    /// A directory, FIFO, socket or device named like a source.
    #[error("is {0}, not a regular file")]
    NotAFile(&'static str),
    /// Opening or reading failed (permissions, not UTF-8, …).
    #[error("cannot read file: {0}")]
    Io(#[from] std::io::Error),
}

/// What kind of non-regular entry `t` is, in words.
fn kind_of(t: fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a file"
    }
}

/// Reads `path` if it is (or is a symlink to) a regular file. The type is checked before
/// opening, and the file is opened non-blocking and checked again after, so a FIFO swapped in
/// between never blocks the reload thread.
pub fn read_source(path: &Path) -> Result<String, SourceError> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(match fs::read_link(path) {
                Ok(target) => SourceError::Dangling(target.display().to_string()),
                Err(_) => SourceError::Io(e),
            });
        }
        Err(e) => return Err(e.into()),
    };
    if !meta.is_file() {
        return Err(SourceError::NotAFile(kind_of(meta.file_type())));
    }
    let mut file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let opened = file.metadata()?;
    if !opened.is_file() {
        return Err(SourceError::NotAFile(kind_of(opened.file_type())));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

fn read_all(
    dir: &Path,
    ext: &str,
    role: &str,
    hasher: &mut Sha256,
    problems: &mut Vec<Problem>,
) -> Vec<SourceFile> {
    let paths = match list(dir, ext) {
        Ok(paths) => paths,
        Err(e) => {
            problems.push(Problem::in_file(
                dir,
                format!("cannot read directory: {e}"),
                Some("check the path in the config and that the directory exists".to_owned()),
            ));
            return Vec::new();
        }
    };
    paths
        .into_iter()
        .filter_map(|p| read_one(&p, role, hasher, problems))
        .collect()
}

fn read_one(
    path: &Path,
    role: &str,
    hasher: &mut Sha256,
    problems: &mut Vec<Problem>,
) -> Option<SourceFile> {
    match read_source(path) {
        Ok(text) => {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            for part in [role.as_bytes(), name.as_bytes(), text.as_bytes()] {
                hasher.update((part.len() as u64).to_le_bytes());
                hasher.update(part);
            }
            Some(SourceFile {
                path: path.to_owned(),
                text,
            })
        }
        Err(e) => {
            let help = match e {
                SourceError::Io(_) => None,
                SourceError::Dangling(_) | SourceError::NotAFile(_) => Some(format!(
                    "every entry named like a {role} file must be a readable regular file (or a symlink to one): fix it, or rename or remove it"
                )),
            };
            problems.push(Problem::in_file(path, e.to_string(), help));
            None
        }
    }
}
