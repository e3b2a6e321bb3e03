//! `kvmeter table` as a stream (issue 41 F7): a phase's `ops` key that is no operation name
//! is refused, and a table of more rows than a Parquet row group holds is written in several
//! that read back as the CSV. Part of tests/report/table.rs (its sweep and helpers).

use super::*;

/// A copy of the sweep's first run below `dir`, its run phase's `ops` replaced by `ops`.
fn run_with_ops(dir: &Path, ops: Map<String, Value>) -> PathBuf {
    let run = sweep().join("points/01-threads=1/r1");
    let copy = dir.join("r1");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::copy(run.join("manifest.json"), copy.join("manifest.json")).unwrap();
    let mut s = json(&run.join("summary.json"));
    assert_eq!(s["phases"][1]["kind"], "run");
    s["phases"][1]["ops"] = Value::Object(ops);
    std::fs::write(copy.join("summary.json"), s.to_string()).unwrap();
    copy
}

/// Issue 41 F7: a key of a phase's `ops` that is no operation name (here a path) is refused
/// with its file and key, exit 2, nothing created; before, any key made a row.
#[test]
fn an_ops_key_that_is_no_operation_name_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let read = json(&sweep().join("points/01-threads=1/r1/summary.json"))["phases"][1]["ops"]
        ["READ"]
        .clone();
    let ops: Map<String, Value> = [("READ".to_string(), read.clone()), ("../x".into(), read)]
        .into_iter()
        .collect();
    let run = run_with_ops(&t.path().join("bad"), ops);
    let out = t.path().join("t.csv");
    refused(
        &[run.as_os_str(), "--output".as_ref(), out.as_os_str()],
        "summary.json: phases[1].ops: key \"../x\" is not an operation name",
        &out,
    );
}

/// Issue 41 F7: a table of more rows than one Parquet row group holds (4,096) is written in
/// several, and reads back as the CSV of the same runs, row by row and cell by cell.
#[test]
fn a_parquet_table_of_several_row_groups_reads_back_as_the_csv() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    let t = tempfile::tempdir().unwrap();
    let ops_of =
        json(&sweep().join("points/01-threads=1/r1/summary.json"))["phases"][1]["ops"].clone();
    let (read, update) = (ops_of["READ"].clone(), ops_of["UPDATE"].clone());
    let ops: Map<String, Value> = (0..5000)
        .map(|i| {
            let op = if i % 2 == 0 { &read } else { &update };
            (format!("OP{i:05}"), op.clone())
        })
        .collect();
    let big = run_with_ops(&t.path().join("big"), ops);
    let (sw, big) = (sweep().to_str().unwrap(), big.to_str().unwrap());
    let (header, csv) = csv_rows(&table(&[sw, big]));
    assert!(csv.len() > 5000, "{}", csv.len());
    let file = t.path().join("t.parquet");
    let o = kvmeter()
        .args(["table", sw, big, "--format", "parquet", "--output"])
        .arg(&file)
        .timeout(LIMIT)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let reader = SerializedFileReader::new(std::fs::File::open(&file).unwrap()).unwrap();
    assert!(reader.metadata().num_row_groups() >= 2);
    let rows = parquet_rows(&file);
    assert_eq!(rows.len(), csv.len());
    for (i, (p, c)) in rows.iter().zip(&csv).enumerate() {
        let names: Vec<&String> = p.iter().map(|(n, _)| n).collect();
        assert_eq!(names, header.iter().collect::<Vec<_>>());
        for (name, field) in p {
            let want = c[name].as_str().unwrap();
            let got = match field {
                Field::Null => String::new(),
                Field::Str(s) => s.clone(),
                Field::Bool(b) => b.to_string(),
                Field::Long(x) => x.to_string(),
                Field::ULong(x) => x.to_string(),
                Field::Double(x) => {
                    assert_eq!(want.parse::<f64>().ok(), Some(*x), "row {i} {name}");
                    continue;
                }
                other => panic!("row {i} {name}: unexpected {other:?}"),
            };
            assert_eq!(got, want, "row {i} {name}");
        }
    }
}
