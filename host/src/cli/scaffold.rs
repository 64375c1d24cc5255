//! `sluice new connector NAME --lang rust|python|js`: writes a starter connector from the
//! templates in `host/templates/` (embedded in the binary), with the WIT world, a connector
//! file and a README whose steps build it and run it. A Rust project gets a copy of the
//! Rust SDK (`plugins/sdk`, also embedded), so it builds outside this checkout.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The languages a starter connector can be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
}

/// `sluice:connector@0.2.0`, which the Python and JavaScript templates target: its records
/// are plain objects of each language.
const WIT: &str = include_str!("../../../wit/0.2.0/connector.wit");

/// `sluice:connector@0.3.0`, which the Rust SDK targets (it packs the records itself).
const WIT_RUST: &str = include_str!("../../../wit/0.3.0/connector.wit");

/// The Rust SDK's source, written into a Rust project as `sluice-connector/`, where the WIT
/// world sits beside it rather than two folders up.
const SDK_LIB: &str = include_str!("../../../plugins/sdk/src/lib.rs");
const SDK_WIT_PATH_IN_CHECKOUT: &str = r#"path: "../../wit/0.3.0","#;
const SDK_WIT_PATH_IN_PROJECT: &str = r#"path: "wit","#;
/// The workspace manifest, for the wit-bindgen release the SDK is built with here.
const WORKSPACE_MANIFEST: &str = include_str!("../../../Cargo.toml");

/// The wit-bindgen release of this checkout's workspace (`wit-bindgen = { version = "..." }`).
fn wit_bindgen_version() -> &'static str {
    WORKSPACE_MANIFEST
        .lines()
        .find_map(|line| line.strip_prefix("wit-bindgen = { version = \""))
        .and_then(|rest| rest.split('"').next())
        .expect("the workspace pins wit-bindgen")
}

/// (path in the new project, template text)
fn templates(lang: Lang) -> &'static [(&'static str, &'static str)] {
    match lang {
        Lang::Rust => &[
            ("Cargo.toml", include_str!("../../templates/rust/Cargo.toml")),
            // The flags this repository builds its own plugins with (WebAssembly SIMD).
            (".cargo/config.toml", include_str!("../../../.cargo/config.toml")),
            ("src/lib.rs", include_str!("../../templates/rust/src/lib.rs")),
            ("sluice-connector/Cargo.toml", include_str!("../../templates/rust/sdk.Cargo.toml")),
            ("sluice-connector/src/lib.rs", SDK_LIB),
            ("sluice-connector/wit/connector.wit", WIT_RUST),
        ],
        Lang::Python => &[("app.py", include_str!("../../templates/python/app.py")), ("wit/connector.wit", WIT)],
        Lang::Js => &[
            ("connector.js", include_str!("../../templates/js/connector.js")),
            ("files.js", include_str!("../../templates/js/files.js")),
            ("package.json", include_str!("../../templates/js/package.json")),
            ("wit/connector.wit", WIT),
            ("wit/files.wit", include_str!("../../templates/js/wit/files.wit")),
            // WASI's filesystem and what it uses, as wasmtime-wasi 48 ships them.
            ("wit/deps/io.wit", include_str!("../../templates/js/wit/deps/io.wit")),
            ("wit/deps/clocks.wit", include_str!("../../templates/js/wit/deps/clocks.wit")),
            ("wit/deps/filesystem.wit", include_str!("../../templates/js/wit/deps/filesystem.wit")),
        ],
    }
}

/// The commands that build the project into `<name>.wasm` in its folder, in order.
pub fn build_steps(lang: Lang, name: &str) -> Vec<String> {
    match lang {
        Lang::Rust => vec![
            "cargo build --release --target wasm32-wasip2".into(),
            format!("cp target/wasm32-wasip2/release/{}.wasm {name}.wasm", name.replace('-', "_")),
        ],
        Lang::Python => vec![format!("componentize-py -d wit -w source-connector componentize app -o {name}.wasm")],
        Lang::Js => vec!["npm install".into(), "npm run build".into()],
    }
}

/// A plugin's name is its file name: lowercase letters, digits and `-`.
pub fn check_name(name: &str) -> anyhow::Result<()> {
    let mut chars = name.chars();
    let starts_with_letter = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    if !starts_with_letter
        || name.len() > 64
        || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        bail!(
            "connector name '{name}': use 1 to 64 lowercase letters, digits and '-', starting with a letter \
             (it becomes the plugin's file name, {name}.wasm)"
        );
    }
    Ok(())
}

/// Writes the starter project into `dir` (which must not exist or be empty) and returns
/// the files written.
pub fn new_connector(name: &str, lang: Lang, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    check_name(name)?;
    if dir.exists() && std::fs::read_dir(dir).with_context(|| dir.display().to_string())?.next().is_some() {
        bail!("{}: the folder exists and is not empty", dir.display());
    }
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{sdk_version}}", env!("CARGO_PKG_VERSION"))
            .replace("{{wit_bindgen_version}}", wit_bindgen_version())
            .replace(SDK_WIT_PATH_IN_CHECKOUT, SDK_WIT_PATH_IN_PROJECT)
    };
    let connector_file = serde_json::to_string_pretty(&serde_json::json!({
        "name": name,
        "config": {"connector.class": name, "tasks.max": "1", "record.count": "10"},
    }))?;
    let mut files: Vec<(String, String)> =
        templates(lang).iter().map(|(path, text)| (path.to_string(), fill(text))).collect();
    files.push(("connector.json".into(), connector_file + "\n"));
    files.push(("README.md".into(), readme(name, lang)));
    let mut written = Vec::new();
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).with_context(|| path.display().to_string())?;
        std::fs::write(&path, text).with_context(|| path.display().to_string())?;
        written.push(path);
    }
    Ok(written)
}

fn readme(name: &str, lang: Lang) -> String {
    let (language, needs) = match lang {
        Lang::Rust => ("Rust", "`rustup target add wasm32-wasip2`"),
        Lang::Python => ("Python", "`pip install componentize-py==0.25.1`"),
        Lang::Js => ("JavaScript", "Node.js 20 or later (npm installs componentize-js)"),
    };
    let build = build_steps(lang, name).iter().map(|s| format!("{s}\n")).collect::<String>();
    let sdk = match lang {
        Lang::Rust => {
            "\n`sluice-connector/` is a copy of the Sluice SDK for Rust with the WIT world it targets \
             (`sluice-connector/wit/`); a newer `sluice new connector` writes a newer one.\n"
        }
        Lang::Python | Lang::Js => "",
    };
    format!(
        "# {name}\n\nA Sluice source connector in {language}, made by `sluice new connector`. It shares `streams` \
         among its tasks and sends `record.count` numbered messages per stream to `topic`. Each record's source \
         partition names its stream (not the task), so a restart, or a new `tasks.max` that moves streams between \
         tasks, resumes every stream after its committed offset.\n\n\
         ## Build\n\nNeeds {needs}.\n\n```sh\n{build}```\n\n\
         ## Run\n\n`sluice` loads every `<name>.wasm` in its plugin folder; this folder will do:\n\n\
         ```sh\nsluice run --until-done --plugin-path . connector.json    # ends once every stream is sent\n\
         sluice topics read {name}\n```\n\n\
         To send a file's text instead of the default message, grant its folder and name it:\n\n\
         ```json\n\"message.file\": \"/data/hello.txt\", \"sandbox.fs.read\": \"/data\"\n```\n\n\
         See Sluice's `docs/writing-connectors.md` for the world's imports and exports.\n{sdk}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_file_names() {
        assert!(check_name("hello-world2").is_ok());
        for bad in ["", "Hello", "1st", "a_b", "a/b", "a.b"] {
            assert!(check_name(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn templates_are_filled_and_refuse_a_used_folder() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("p");
        let files = new_connector("my-source", Lang::Rust, &project).unwrap();
        assert!(files.iter().any(|f| f.ends_with("src/lib.rs")));
        let cargo = std::fs::read_to_string(project.join("Cargo.toml")).unwrap();
        assert!(cargo.contains(r#"name = "my-source""#) && !cargo.contains("{{"), "{cargo}");
        let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
        assert!(readme.contains("cp target/wasm32-wasip2/release/my_source.wasm my-source.wasm"), "{readme}");
        // The SDK is in the project, pointing at the WIT world beside it.
        assert!(cargo.contains(r#"sluice-connector = { path = "sluice-connector" }"#), "{cargo}");
        let sdk = std::fs::read_to_string(project.join("sluice-connector/src/lib.rs")).unwrap();
        assert!(SDK_LIB.contains(SDK_WIT_PATH_IN_CHECKOUT), "the SDK's generate! path moved: update scaffold.rs");
        assert!(sdk.contains(SDK_WIT_PATH_IN_PROJECT) && !sdk.contains(SDK_WIT_PATH_IN_CHECKOUT));
        assert_eq!(std::fs::read_to_string(project.join("sluice-connector/wit/connector.wit")).unwrap(), WIT_RUST);
        let sdk_manifest = std::fs::read_to_string(project.join("sluice-connector/Cargo.toml")).unwrap();
        let pinned = format!(r#"wit-bindgen = {{ version = "{}""#, wit_bindgen_version());
        assert!(sdk_manifest.contains(&pinned) && !sdk_manifest.contains("{{"), "{sdk_manifest}");
        let error = new_connector("my-source", Lang::Python, &project).unwrap_err().to_string();
        assert!(error.contains("exists and is not empty"), "{error}");
    }
}
