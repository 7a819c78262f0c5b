//! Installed Python and Node.js packages, read from their metadata on disk, for
//! `GET /v1/sandbox/packages/{python,nodejs}`.
//!
//! No interpreter is started: Python distributions are the `*.dist-info/METADATA` and
//! `*.egg-info` entries of the site directories the system `python3` searches, in its order
//! (the user's site first, then `/usr/local`, then Debian's), and Node.js packages are the
//! `package.json` files of the global module directories (npm's and Debian's). The first
//! directory that has a name wins, as it does for the interpreter. Reads are bounded: at most
//! [`MAX_PACKAGES`] entries per listing and [`MAX_METADATA_BYTES`] of each metadata file.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Most packages one listing reports; past it the listing says it is truncated.
pub const MAX_PACKAGES: usize = 20_000;
/// How much of a metadata file is read (the headers come first; descriptions can be long).
const MAX_METADATA_BYTES: u64 = 64 * 1024;

/// One installed package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    pub name: String,
    pub version: String,
    /// The directory the package was found in (a site directory or `node_modules`).
    pub location: PathBuf,
}

/// A listing, sorted by name (case-insensitively, as `pip list` does).
#[derive(Debug, Default)]
pub struct Listing {
    pub packages: Vec<Package>,
    /// Whether [`MAX_PACKAGES`] cut the listing short.
    pub truncated: bool,
}

/// The site directories `python3` searches, in its order, that exist: the user's site, then the
/// `/usr/local` and Debian directories of every installed Python 3 version.
pub fn python_site_dirs(home: &Path, root: &Path) -> Vec<PathBuf> {
    let versions = python_versions(&root.join("usr/lib"));
    let mut dirs = Vec::new();
    for version in &versions {
        dirs.push(home.join(".local/lib").join(version).join("site-packages"));
    }
    for version in &versions {
        dirs.push(
            root.join("usr/local/lib")
                .join(version)
                .join("dist-packages"),
        );
        dirs.push(
            root.join("usr/local/lib")
                .join(version)
                .join("site-packages"),
        );
    }
    dirs.push(root.join("usr/lib/python3/dist-packages"));
    for version in &versions {
        dirs.push(root.join("usr/lib").join(version).join("dist-packages"));
    }
    dirs.retain(|dir| dir.is_dir());
    dirs
}

/// `python3.N` directory names under `lib` (the installed interpreters' standard libraries),
/// newest first.
fn python_versions(lib: &Path) -> Vec<String> {
    let mut versions: Vec<(u32, String)> = std::fs::read_dir(lib)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let minor = name.strip_prefix("python3.")?.parse().ok()?;
            Some((minor, name))
        })
        .collect();
    versions.sort_by_key(|(minor, _)| std::cmp::Reverse(*minor));
    versions.into_iter().map(|(_, name)| name).collect()
}

/// The Python distributions installed in `dirs` (see [`python_site_dirs`]).
pub fn python_packages(dirs: &[PathBuf]) -> Listing {
    let mut found = Found::default();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let metadata = if file_name.ends_with(".dist-info") {
                path.join("METADATA")
            } else if file_name.ends_with(".egg-info") {
                // A directory holding PKG-INFO, or (older setuptools) the PKG-INFO itself.
                if path.is_dir() {
                    path.join("PKG-INFO")
                } else {
                    path.clone()
                }
            } else {
                continue;
            };
            let Some((name, version)) = read_prefix(&metadata).and_then(|t| python_headers(&t))
            else {
                continue;
            };
            if !found.add(name, version, dir) {
                return found.finish(true);
            }
        }
    }
    found.finish(false)
}

/// `Name` and `Version` from the RFC 822-style headers of a METADATA or PKG-INFO file.
fn python_headers(text: &str) -> Option<(String, String)> {
    let mut name = None;
    let mut version = None;
    for line in text.lines() {
        if line.is_empty() {
            break; // the body (the description) follows the first empty line
        }
        if let Some(value) = line.strip_prefix("Name:") {
            name.get_or_insert_with(|| value.trim().to_string());
        } else if let Some(value) = line.strip_prefix("Version:") {
            version.get_or_insert_with(|| value.trim().to_string());
        }
    }
    let name = name.filter(|n| !n.is_empty())?;
    Some((name, version.unwrap_or_default()))
}

/// The global Node.js module directories that exist: npm's prefixes, the user's
/// (`~/.npm-global`, a common prefix for installs without root) and Debian's.
pub fn node_module_dirs(home: &Path, root: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![
        home.join(".npm-global/lib/node_modules"),
        root.join("usr/local/lib/node_modules"),
        root.join("usr/lib/node_modules"),
        root.join("usr/share/nodejs"),
        root.join("usr/lib/nodejs"),
    ];
    dirs.retain(|dir| dir.is_dir());
    dirs
}

/// The packages in `dirs` (see [`node_module_dirs`]), scoped ones (`@scope/name`) included.
pub fn node_packages(dirs: &[PathBuf]) -> Listing {
    let mut found = Found::default();
    for dir in dirs {
        let mut package_dirs = Vec::new();
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let scoped = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('@'));
            if scoped {
                package_dirs.extend(
                    std::fs::read_dir(&path)
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(|e| e.path()),
                );
            } else {
                package_dirs.push(path);
            }
        }
        for package in package_dirs {
            let Some((name, version)) =
                read_prefix(&package.join("package.json")).and_then(|text| node_manifest(&text))
            else {
                continue;
            };
            if !found.add(name, version, dir) {
                return found.finish(true);
            }
        }
    }
    found.finish(false)
}

/// `name` and `version` of a package.json.
fn node_manifest(text: &str) -> Option<(String, String)> {
    #[derive(serde::Deserialize)]
    struct Manifest {
        name: Option<String>,
        version: Option<String>,
    }
    let manifest: Manifest = serde_json::from_str(text).ok()?;
    let name = manifest.name.filter(|n| !n.is_empty())?;
    Some((name, manifest.version.unwrap_or_default()))
}

/// The first [`MAX_METADATA_BYTES`] of a file as text (lossy), or `None` if it cannot be read.
fn read_prefix(path: &Path) -> Option<String> {
    let mut bytes = Vec::new();
    File::open(path)
        .ok()?
        .take(MAX_METADATA_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Packages by normalised name; the first location of a name wins.
#[derive(Default)]
struct Found {
    by_name: BTreeMap<String, Package>,
}

impl Found {
    /// Adds a package unless its name is known; `false` once the listing is full.
    fn add(&mut self, name: String, version: String, location: &Path) -> bool {
        if self.by_name.len() >= MAX_PACKAGES {
            return false;
        }
        let key = name.to_lowercase().replace(['_', '.'], "-");
        self.by_name.entry(key).or_insert_with(|| Package {
            name,
            version,
            location: location.to_path_buf(),
        });
        true
    }

    fn finish(self, truncated: bool) -> Listing {
        Listing {
            packages: self.by_name.into_values().collect(),
            truncated,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    #[test]
    fn python_distributions_in_search_order() {
        let root = tempfile::tempdir().expect("a directory");
        let home = root.path().join("home/agent");
        let r = root.path();
        std::fs::create_dir_all(r.join("usr/lib/python3.11")).expect("mkdir");
        std::fs::create_dir_all(r.join("usr/lib/python3.9")).expect("mkdir");
        write(
            &home.join(".local/lib/python3.11/site-packages/Requests-2.99.dist-info/METADATA"),
            "Metadata-Version: 2.1\nName: requests\nVersion: 2.99.0\n\nName: not-this\n",
        );
        write(
            &r.join("usr/lib/python3/dist-packages/requests-2.28.1.dist-info/METADATA"),
            "Name: requests\nVersion: 2.28.1\n",
        );
        write(
            &r.join("usr/lib/python3/dist-packages/ipykernel-6.20.2.egg-info/PKG-INFO"),
            "Metadata-Version: 2.1\nName: ipykernel\nVersion: 6.20.2\n",
        );
        write(
            &r.join("usr/lib/python3/dist-packages/six-1.16.0.egg-info"),
            "Name: six\nVersion: 1.16.0\n",
        );
        write(
            &r.join("usr/lib/python3/dist-packages/broken-1.dist-info/METADATA"),
            "Version: 1\n",
        );
        write(
            &r.join("usr/lib/python3/dist-packages/not_a_package/__init__.py"),
            "",
        );

        let dirs = python_site_dirs(&home, r);
        assert_eq!(
            dirs,
            [
                home.join(".local/lib/python3.11/site-packages"),
                r.join("usr/lib/python3/dist-packages"),
            ]
        );
        let listing = python_packages(&dirs);
        let got: Vec<(&str, &str)> = listing
            .packages
            .iter()
            .map(|p| (p.name.as_str(), p.version.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("ipykernel", "6.20.2"),
                ("requests", "2.99.0"),
                ("six", "1.16.0")
            ]
        );
        assert_eq!(
            listing.packages[1].location, dirs[0],
            "the user's site wins"
        );
        assert!(!listing.truncated);
    }

    #[test]
    fn node_packages_scoped_and_plain() {
        let root = tempfile::tempdir().expect("a directory");
        let r = root.path();
        let home = r.join("home/agent");
        write(
            &r.join("usr/lib/node_modules/npm/package.json"),
            r#"{"name":"npm","version":"9.2.0"}"#,
        );
        write(
            &r.join("usr/share/nodejs/@types/node/package.json"),
            r#"{"name":"@types/node","version":"18.0.0","description":"x"}"#,
        );
        write(
            &r.join("usr/share/nodejs/npm/package.json"),
            r#"{"name":"npm","version":"1.0.0"}"#,
        );
        write(&r.join("usr/share/nodejs/bad/package.json"), "{not json");
        let dirs = node_module_dirs(&home, r);
        let listing = node_packages(&dirs);
        let got: Vec<(&str, &str)> = listing
            .packages
            .iter()
            .map(|p| (p.name.as_str(), p.version.as_str()))
            .collect();
        assert_eq!(got, [("@types/node", "18.0.0"), ("npm", "9.2.0")]);
    }
}
