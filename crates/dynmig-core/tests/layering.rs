//! The core's modules import one way: `types` and `geometry` at the bottom, `estimate` above
//! them, `config` above `estimate`, `submit` on top. An import back down that way (config or
//! estimate naming submit, estimate naming config, layout naming place) makes a cycle again.

use std::path::Path;

/// Every line of the `.rs` files under `src/<dir>` (or the file `src/<dir>`) that mentions
/// `needle` outside a comment.
fn uses(dir: &str, needle: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir);
    let mut files = vec![root.clone()];
    if root.is_dir() {
        files = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "rs"))
            .collect();
    }
    let mut hits = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains(needle) {
                hits.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    hits
}

#[test]
fn config_and_estimate_never_import_submit_so_there_is_no_config_submit_estimate_cycle() {
    for dir in ["config", "estimate", "types.rs"] {
        assert_eq!(uses(dir, "crate::submit"), Vec::<String>::new(), "{dir}");
    }
    assert_eq!(uses("estimate", "crate::config"), Vec::<String>::new());
    assert_eq!(uses("types.rs", "crate::"), Vec::<String>::new());
}

#[test]
fn layout_never_imports_place_so_there_is_no_layout_place_cycle() {
    assert_eq!(uses("geometry/layout.rs", "place"), Vec::<String>::new());
    assert_eq!(uses("geometry/layout.rs", "text::"), Vec::<String>::new());
    assert_eq!(uses("geometry/place.rs", "text::"), Vec::<String>::new());
}

#[test]
fn the_crate_reads_no_file_outside_its_folder_at_build_time() {
    let hits: Vec<String> = uses("config", "include_str!")
        .into_iter()
        .filter(|l| l.contains(".."))
        .collect();
    assert_eq!(hits, Vec::<String>::new());
}
