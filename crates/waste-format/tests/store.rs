//! Store layout round trips and failure modes: records written and read back
//! at 4 KiB-aligned offsets; corrupted, truncated or foreign files refused
//! with errors naming the file, layer and expert; the manifest's version and
//! index hashes enforced; streamed safetensors readable by the reference crate.

use std::collections::BTreeMap;
use std::path::Path;

use waste_format::backbone::{SafetensorsWriter, TensorSpec};
use waste_format::experts::{LayerHeader, layer_file_name};
use waste_format::manifest::{IndexRef, Source, sha256_file};
use waste_format::{Error, ExpertsDir, ExpertsIndex, LayerWriter, Manifest, Version};

fn record(layer: u32, expert: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(layer * 7 + expert * 13) as u8
        })
        .collect()
}

/// Writes a two-layer experts folder (records of 5000 bytes: stride 8192).
fn write_experts(dir: &Path) -> ExpertsIndex {
    let mut index = ExpertsIndex::new("test", "q3", 3, 2);
    for layer in [1u32, 3] {
        let mut w = LayerWriter::create(dir, LayerHeader::new(layer, 4, 3, 64, 32, 5000)).unwrap();
        for e in 0..4 {
            w.push(&record(layer, e, 5000)).unwrap();
        }
        index.layers.push(w.finish().unwrap());
    }
    index.save(dir).unwrap();
    index
}

#[test]
fn records_round_trip_at_aligned_offsets() {
    let tmp = tempfile::tempdir().unwrap();
    let index = write_experts(tmp.path());
    assert_eq!(index.bytes_per_token(), 2 * 2 * 5000);
    let dir = ExpertsDir::open(tmp.path()).unwrap();
    let mut buf = Vec::new();
    for layer in [1u32, 3] {
        for e in 0..4 {
            let loc = dir.read_record(layer, e, &mut buf).unwrap();
            assert_eq!(buf, record(layer, e, 5000));
            assert_eq!(loc.offset % 4096, 0);
            assert_eq!(loc.offset, 4096 + u64::from(e) * 8192);
        }
    }
    dir.verify_all(|_, _| {}).unwrap();
    assert!(matches!(
        dir.locate(2, 0),
        Err(Error::LayerNotFound { layer: 2 })
    ));
    assert!(matches!(
        dir.locate(1, 4),
        Err(Error::ExpertOutOfRange {
            layer: 1,
            expert: 4,
            n_experts: 4
        })
    ));
}

#[test]
fn a_corrupted_record_names_layer_expert_and_file() {
    let tmp = tempfile::tempdir().unwrap();
    write_experts(tmp.path());
    let path = tmp.path().join(layer_file_name(3));
    let mut bytes = fs_err::read(&path).unwrap();
    bytes[4096 + 2 * 8192 + 100] ^= 0x40;
    fs_err::write(&path, &bytes).unwrap();
    let dir = ExpertsDir::open(tmp.path()).unwrap();
    let err = dir.read_record(3, 2, &mut Vec::new()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::ChecksumMismatch {
                layer: 3,
                expert: 2,
                ..
            }
        ),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("layer-003.experts") && msg.contains("layer 3 expert 2"),
        "{msg}"
    );
    dir.read_record(3, 1, &mut Vec::new()).unwrap();
    assert!(dir.verify_all(|_, _| {}).is_err());
}

#[test]
fn truncated_or_foreign_layer_files_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    write_experts(tmp.path());
    let path = tmp.path().join(layer_file_name(1));
    let bytes = fs_err::read(&path).unwrap();

    fs_err::write(&path, &bytes[..bytes.len() - 10]).unwrap();
    let err = ExpertsDir::open(tmp.path()).unwrap_err().to_string();
    assert!(
        err.contains("layer-001.experts") && err.contains("truncated"),
        "{err}"
    );

    let mut bad = bytes.clone();
    bad[30] ^= 1; // d_ff, under the header checksum
    fs_err::write(&path, &bad).unwrap();
    assert!(matches!(
        ExpertsDir::open(tmp.path()),
        Err(Error::BadHeader { .. })
    ));

    let mut newer = LayerHeader::new(1, 4, 3, 64, 32, 5000);
    newer.version = Version {
        major: 1,
        minor: 99,
    };
    let mut file = newer.encode();
    file.extend_from_slice(&bytes[4096..]);
    fs_err::write(&path, &file).unwrap();
    let err = ExpertsDir::open(tmp.path()).unwrap_err();
    assert!(matches!(err, Error::Version { .. }), "{err}");

    fs_err::write(&path, b"not a layer file").unwrap();
    assert!(ExpertsDir::open(tmp.path()).is_err());
}

#[test]
fn header_decoding_never_panics_on_garbage() {
    let path = Path::new("fuzz");
    let good = LayerHeader::new(7, 896, 3, 3584, 3072, 12_345_678).encode();
    assert_eq!(LayerHeader::decode(&good, path).unwrap().layer, 7);
    let mut seed = 0x9E37_79B9u32;
    for len in [0, 7, 63, 64, 4096] {
        for _ in 0..200 {
            let mut b: Vec<u8> = good[..len.min(good.len())].to_vec();
            for _ in 0..4 {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                if !b.is_empty() {
                    let i = seed as usize % b.len().min(64);
                    b[i] = (seed >> 8) as u8;
                }
            }
            let _ = LayerHeader::decode(&b, path);
        }
    }
}

fn manifest(root: &Path) -> Manifest {
    Manifest {
        format_version: waste_format::FORMAT_VERSION,
        created_by: "test".into(),
        source: Source {
            path: "src".into(),
            kind: "huggingface".into(),
            config_sha256: "0".into(),
            files: vec![],
        },
        experts_format: "q3".into(),
        backbone_format: "native".into(),
        backbone_index: IndexRef {
            path: "backbone/model.safetensors.index.json".into(),
            sha256: sha256_file(&root.join("backbone/model.safetensors.index.json")).unwrap(),
        },
        experts_index: IndexRef {
            path: "experts/index.json".into(),
            sha256: sha256_file(&root.join("experts/index.json")).unwrap(),
        },
    }
}

#[test]
fn the_manifest_is_required_and_pins_both_indexes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    fs_err::create_dir_all(root.join("backbone")).unwrap();
    fs_err::create_dir_all(root.join("experts")).unwrap();
    write_experts(&root.join("experts"));
    waste_format::backbone::write_index(&root.join("backbone"), &BTreeMap::new(), 0).unwrap();

    assert!(matches!(
        Manifest::load_verified(root),
        Err(Error::MissingManifest { .. })
    ));
    let m = manifest(root);
    m.write_atomic(root).unwrap();
    assert_eq!(Manifest::load_verified(root).unwrap(), m);

    // An index changed after the manifest was written is refused.
    let mut index = ExpertsIndex::load(&root.join("experts")).unwrap();
    index.top_k = 8;
    index.save(&root.join("experts")).unwrap();
    assert!(matches!(
        Manifest::load_verified(root),
        Err(Error::IndexHash { .. })
    ));

    let mut old = manifest(root);
    old.format_version = Version { major: 2, minor: 0 };
    old.write_atomic(root).unwrap();
    assert!(matches!(
        Manifest::load_verified(root),
        Err(Error::Version { .. })
    ));
}

#[test]
fn streamed_safetensors_read_back_with_the_reference_crate() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("shard.safetensors");
    let a: Vec<u8> = (0..24u8).collect();
    let b: Vec<u8> = vec![7; 6];
    let specs = vec![
        TensorSpec {
            name: "a.weight".into(),
            dtype: "F32".into(),
            shape: vec![2, 3],
            bytes: 24,
        },
        TensorSpec {
            name: "b.weight".into(),
            dtype: "U8".into(),
            shape: vec![6],
            bytes: 6,
        },
    ];
    let mut w = SafetensorsWriter::create(
        &path,
        specs.clone(),
        &BTreeMap::from([("k".into(), "v".into())]),
    )
    .unwrap();
    assert!(w.write("b.weight", &b).is_err(), "out of order");
    w.write("a.weight", &a).unwrap();
    w.write("b.weight", &b).unwrap();
    w.finish().unwrap();
    let bytes = fs_err::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.tensor("a.weight").unwrap().data(), &a[..]);
    assert_eq!(st.tensor("a.weight").unwrap().shape(), [2, 3]);
    assert_eq!(st.tensor("b.weight").unwrap().data(), &b[..]);

    let mut short =
        SafetensorsWriter::create(&tmp.path().join("s.safetensors"), specs, &BTreeMap::new())
            .unwrap();
    short.write("a.weight", &a).unwrap();
    assert!(short.finish().is_err());
    assert!(
        !tmp.path().join("s.safetensors").exists(),
        "an unfinished shard never appears under its name"
    );
}
