//! The model file at run time: what is saved loads back the same, a file says what it was
//! trained for and is refused elsewhere or when it is no model, and the shipped models load
//! and save back byte for byte (the runtime writes the file training's candle wrote).

use dynmig_core::geometry::{A100_40GB, A100_80GB, H100_80GB};
use dynmig_learn::catalogue::Catalogue;
use dynmig_learn::net::{Model, FORMAT, MAX_FILE_BYTES};
use std::path::{Path, PathBuf};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dynmig-learn-model-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn shipped(gpu: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../models/learned-{gpu}.safetensors"))
}

#[test]
fn a_saved_model_loads_back_the_same_and_decides_the_same() {
    let d = dir("round-trip");
    let m = Model::fresh(Catalogue::for_model(&A100_40GB), 16, "test".into(), 7);
    let file = d.join("m.safetensors");
    m.save(&file).unwrap();
    let back = Model::load(&file, &A100_40GB).unwrap();
    assert_eq!(back.meta, m.meta);
    assert_eq!(back.net, m.net);
    assert_eq!(back.meta.format, FORMAT);
    let x: Vec<f32> = (0..m.meta.inputs).map(|i| (i as f32 * 0.37).sin()).collect();
    assert_eq!(back.net.forward(&x).unwrap(), m.net.forward(&x).unwrap());
    assert_eq!(Model::trained_for(&file).unwrap().name, "A100-40GB");
    // Saving again gives the same bytes.
    let again = d.join("again.safetensors");
    back.save(&again).unwrap();
    assert_eq!(std::fs::read(&file).unwrap(), std::fs::read(&again).unwrap());
}

#[test]
fn a_model_for_another_gpu_model_or_no_model_is_refused_with_why() {
    let d = dir("refuse");
    let file = d.join("a100.safetensors");
    Model::fresh(Catalogue::for_model(&A100_40GB), 8, "ten days".into(), 1)
        .save(&file)
        .unwrap();
    let e = Model::load(&file, &H100_80GB).unwrap_err().to_string();
    assert!(
        e.contains("was trained for A100-40GB GPUs")
            && e.contains("(ten days)")
            && e.contains("this cluster has H100-80GB GPUs"),
        "{e}"
    );
    let junk = d.join("junk.safetensors");
    std::fs::write(&junk, b"not a model").unwrap();
    let e = format!("{:#}", Model::load(&junk, &A100_40GB).unwrap_err());
    assert!(e.contains("reading model") && e.contains("junk.safetensors"), "{e}");
    let e = format!(
        "{:#}",
        Model::load(&d.join("missing.safetensors"), &A100_40GB).unwrap_err()
    );
    assert!(e.contains("reading model") && e.contains("missing.safetensors"), "{e}");
    // A file over the bound is refused before it is read whole (a sparse file: no disk used).
    let big = d.join("big.safetensors");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(MAX_FILE_BYTES + 1)
        .unwrap();
    let e = format!("{:#}", Model::load(&big, &A100_40GB).unwrap_err());
    assert!(e.contains("reading model") && e.contains("larger than 64 MiB"), "{e}");
    let e = format!("{:#}", Model::trained_for(&big).unwrap_err());
    assert!(e.contains("larger than 64 MiB"), "{e}");
}

#[test]
fn a_file_of_another_format_or_weights_that_do_not_match_its_meta_is_refused() {
    let d = dir("format");
    let mut m = Model::fresh(Catalogue::for_model(&A100_40GB), 8, "test".into(), 1);
    m.meta.format = 1;
    let old = d.join("format1.safetensors");
    m.save(&old).unwrap();
    let e = format!("{:#}", Model::load(&old, &A100_40GB).unwrap_err());
    assert!(e.contains("model format 1") && e.contains("train it again"), "{e}");
    // A meta that says 16 hidden units over weights of 8.
    m.meta.format = FORMAT;
    m.meta.hidden = 16;
    let lying = d.join("lying.safetensors");
    m.save(&lying).unwrap();
    let e = format!("{:#}", Model::load(&lying, &A100_40GB).unwrap_err());
    assert!(
        e.contains("weights do not match the meta") && e.contains("l1.bias"),
        "{e}"
    );
    // A safetensors file without a meta.
    let bare = d.join("bare.safetensors");
    let w = [0u8; 16];
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4], &w).unwrap();
    safetensors::serialize_to_file([("l1.bias", view)], None, &bare).unwrap();
    let e = format!("{:#}", Model::load(&bare, &A100_40GB).unwrap_err());
    assert!(e.contains("is not a dynmig model (no meta)"), "{e}");
}

#[test]
fn the_shipped_models_load_for_their_gpus_and_save_back_byte_for_byte() {
    let d = dir("shipped");
    for (gpu, model) in [
        ("A100-40GB", &A100_40GB),
        ("A100-80GB", &A100_80GB),
        ("H100-80GB", &H100_80GB),
    ] {
        let file = shipped(gpu);
        assert_eq!(Model::trained_for(&file).unwrap().name, gpu);
        let m = Model::load(&file, model).unwrap();
        assert_eq!((m.meta.hidden, m.net.hidden(), m.net.actions()), (32, 32, 7));
        let copy = d.join(format!("{gpu}.safetensors"));
        m.save(&copy).unwrap();
        assert_eq!(
            std::fs::read(&file).unwrap(),
            std::fs::read(&copy).unwrap(),
            "{gpu}: the runtime writes the file candle wrote"
        );
    }
}
