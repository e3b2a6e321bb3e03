//! The fuzz targets over what a command line, a published plan or an input file says
//! (docs/fuzzing.md): YCSB properties, `-p` values, flags, `--fault` and `--antagonist`
//! specs, experiment and cost TOML. Each goes through the entry the command uses —
//! `plan::build` (store `null`, nothing run or created), `Job::check`, the experiment and cost
//! loaders — so a finding here is a finding in kvmeter. Shared helpers for files.rs too.

use super::engine::Target;
use kvmeter::plan::Request;
use std::path::{Path, PathBuf};

/// Every target, in the order the table lists them.
pub fn all() -> Vec<Target> {
    let mut v = vec![
        Target {
            name: "props",
            seeds: seeds_props,
            dict: PROPS_DICT,
            run: props,
        },
        Target {
            name: "pvals",
            seeds: seeds_pvals,
            dict: PROPS_DICT,
            run: pvals,
        },
        Target {
            name: "flags",
            seeds: seeds_flags,
            dict: FLAGS_DICT,
            run: flags,
        },
        Target {
            name: "fault",
            seeds: seeds_fault,
            dict: FAULT_DICT,
            run: fault,
        },
        Target {
            name: "antagonist",
            seeds: seeds_antagonist,
            dict: ANTAGONIST_DICT,
            run: antagonist,
        },
        Target {
            name: "experiment",
            seeds: seeds_experiment,
            dict: EXPERIMENT_DICT,
            run: experiment,
        },
        Target {
            name: "cost",
            seeds: seeds_cost,
            dict: COST_DICT,
            run: cost,
        },
    ];
    v.extend(super::files::all());
    v.extend(super::replies::all());
    v.extend(super::inputs::all());
    v
}

/// Where fixed seed files live (tests/fuzz/seeds/<target>/...).
pub fn seed_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz/seeds")
        .join(target)
}

pub fn files_in(dir: &Path) -> Vec<Vec<u8>> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// A scratch directory of this process (removed by the OS's tmp cleaning, small).
pub fn scratch() -> &'static Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        tempfile::Builder::new()
            .prefix("kvmeter-fuzz-")
            .tempdir()
            .unwrap()
    })
    .path()
}

/// Inputs a target must not pass on: a `plugin:` store is a dlopen, device and proc paths
/// read forever. Those are the trust model's business (F1/F2), not a parser's.
pub fn unsafe_input(s: &str) -> bool {
    ["plugin", "/dev", "/proc", "/sys", "cmd:"]
        .iter()
        .any(|n| s.contains(n))
}

pub fn text(input: &[u8]) -> String {
    String::from_utf8_lossy(input).into_owned()
}

fn lines(input: &[u8]) -> Vec<String> {
    text(input).split('\n').map(str::to_string).collect()
}

fn run_request() -> Request {
    Request {
        command: "run".into(),
        store: "null".into(),
        phase: Some("both".into()),
        workload_files: vec!["workloada".into()],
        quiet: true,
        ..Default::default()
    }
}

// ---- YCSB properties: a -P file, and -p values -------------------------------------------

const PROPS_DICT: &[&str] = &[
    "recordcount",
    "operationcount",
    "insertstart",
    "insertcount",
    "fieldcount",
    "fieldlength",
    "minfieldlength",
    "fieldlengthdistribution",
    "readproportion",
    "updateproportion",
    "insertproportion",
    "scanproportion",
    "readmodifywriteproportion",
    "deleteproportion",
    "requestdistribution",
    "zipfian",
    "uniform",
    "latest",
    "hotspot",
    "exponential",
    "sequential",
    "constant",
    "histogram",
    "hotspotdatafraction",
    "hotspotopnfraction",
    "maxscanlength",
    "minscanlength",
    "scanlengthdistribution",
    "insertorder",
    "hashed",
    "ordered",
    "readallfields",
    "writeallfields",
    "maxexecutiontime",
    "threadcount",
    "target",
    "table",
    "zeropadding",
    "fieldnameprefix",
    "exponential.percentile",
    "exponential.frac",
    "insertionretrylimit",
    "insertionretryinterval",
    "dataintegrity",
    "measurementtype",
    "hdrhistogram",
    "histogram.buckets",
    "workload",
    "site.ycsb.workloads.CoreWorkload",
    "true",
    "false",
    "=",
    ":",
    "\\",
    "\\u0041",
    "#",
    "!",
    "\n",
    "\r\n",
    " ",
    "\t",
];

fn seeds_props() -> Vec<Vec<u8>> {
    let mut v = files_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads"));
    v.push(b"recordcount=1000\noperationcount=1000\ninsertstart=500\ninsertcount=500\n".to_vec());
    v.push(
        b"requestdistribution=hotspot\nhotspotdatafraction=0.2\nhotspotopnfraction=0.8\n".to_vec(),
    );
    v.push(
        b"fieldlengthdistribution=zipfian\nfieldlength=100\nminfieldlength=1\nmaxexecutiontime=5\n"
            .to_vec(),
    );
    v
}

fn props(input: &[u8]) -> bool {
    thread_local! {
        static FILE: PathBuf = scratch().join(format!("props-{:?}", std::thread::current().id()));
    }
    FILE.with(|f| {
        if std::fs::write(f, input).is_err() {
            return false;
        }
        let mut req = run_request();
        req.workload_files = vec![f.display().to_string()];
        kvmeter::plan::build(&req).is_ok()
    })
}

fn seeds_pvals() -> Vec<Vec<u8>> {
    [
        "recordcount=100\noperationcount=1000",
        "insertstart=50\ninsertcount=50\nrecordcount=100",
        "readproportion=0.5\nupdateproportion=0.5\nrequestdistribution=zipfian",
        "maxexecutiontime=10\ntarget=1000\nthreadcount=2",
        "fieldcount=10\nfieldlength=100\nfieldlengthdistribution=uniform\nminfieldlength=10",
        "scanproportion=1\nmaxscanlength=100\nscanlengthdistribution=zipfian",
        "requestdistribution=exponential\nexponential.percentile=95\nexponential.frac=0.5",
        "insertorder=ordered\nzeropadding=20\nrecordcount=9223372036854775807",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn pvals(input: &[u8]) -> bool {
    let mut req = run_request();
    req.props = lines(input);
    kvmeter::plan::build(&req).is_ok()
}

// ---- Flags through clap and plan::build ---------------------------------------------------

const FLAGS_DICT: &[&str] = &[
    "run",
    "suite",
    "pressure",
    "sweep",
    "capacity",
    "report",
    "compare",
    "--store",
    "null",
    "redis",
    "memcached",
    "etcd",
    "-P",
    "workloada",
    "workloadb",
    "workloadc",
    "workloade",
    "-p",
    "--records",
    "--ops",
    "--threads",
    "--duration",
    "--warmup",
    "--interval",
    "--status-interval",
    "--telemetry-interval",
    "--target",
    "--rate",
    "--arrival",
    "fixed",
    "poisson",
    "--seed",
    "--format",
    "json",
    "table",
    "--clock",
    "--timeline",
    "--fault",
    "--antagonist",
    "--store-opt",
    "--phase",
    "load",
    "both",
    "--io-file-size",
    "--random-ratio",
    "--block-sizes",
    "--step",
    "--param",
    "threads=1,2",
    "--repeat",
    "--slo",
    "p99<1ms",
    "--start-rate",
    "--max-rate",
    "--step-factor",
    "--precision",
    "--max-points",
    "--idle-baseline",
    "--power",
    "--counters",
    "1s",
    "10ms",
    "2m",
    "1e20",
    "cpus=0-3",
    "timeout_ms=100",
    "replicas=2",
    "members=3",
    "cluster=3",
];

fn seeds_flags() -> Vec<Vec<u8>> {
    [
        "run\n--store\nnull\n-P\nworkloadc\n--records\n100\n--ops\n1000",
        "run\n--store\nnull\n-P\nworkloada\n--duration\n10s\n--warmup\n1s\n--interval\n100ms",
        "run\n--store\nnull\n-P\nworkloadb\n--target\n20000\n--duration\n60s",
        "run\n--store\nnull\n-P\nworkloadc\n--rate\n1000\n--arrival\npoisson\n--duration\n5s",
        "suite\n--store\nnull\n--records\n1000",
        "pressure\n--store\nnull\n-P\nworkloada\n--step\n2s\n--interval\n1s\n--block-sizes\n4,512",
        "sweep\n--store\nnull\n-P\nworkloadc\n--param\nthreads=1,2,4\n--duration\n1s",
        "capacity\n--store\nnull\n-P\nworkloadc\n--slo\np99<1ms\n--max-rate\n100000",
        "run\n--store\nredis\n--store-opt\nreplicas=2\n-P\nworkloada\n--duration\n30s\n--fault\nat=10s,kill=primary,restart_after=5s",
        "run\n--store\nnull\n-P\nworkloadc\n--antagonist\ncpu:threads=1,duty=0.5,cpus=0-1\n--duration\n2s",
        "run\n--store\nmemcached\n--store-opt\ncpus=0/1\n-P\nworkloadc\n--telemetry-interval\n0\n--status-interval\n1s",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn flags(input: &[u8]) -> bool {
    use clap::Parser as _;
    let t = text(input);
    if unsafe_input(&t) {
        return false;
    }
    let args = std::iter::once("kvmeter".to_string()).chain(t.split('\n').map(str::to_string));
    let Ok(cli) = kvmeter::args::Cli::try_parse_from(args) else {
        return false;
    };
    match kvmeter::experiment::job::Job::from_command(cli.command) {
        Ok(Some(job)) => job.check().is_ok(),
        _ => false,
    }
}

// ---- --fault and --antagonist --------------------------------------------------------------

const FAULT_DICT: &[&str] = &[
    "at=",
    "kill=",
    "stop=",
    "restart=",
    "restart_after=",
    "for=",
    "wait_sync=",
    "true",
    "false",
    "leader",
    "primary",
    "replica:0",
    "replica:1",
    "member:1",
    "member:2",
    "master:0",
    "any",
    ",",
    "30s",
    "5s",
    "500ms",
    "1m30s",
    "\n",
    "replicas=2",
    "members=3",
    "cluster=3",
    "sentinels=3",
    "cluster_replicas=1",
];

fn seeds_fault() -> Vec<Vec<u8>> {
    [
        "redis\nat=10s,kill=primary,restart_after=5s\nreplicas=2",
        "redis\nat=5s,stop=replica:0,for=2s\nreplicas=1",
        "etcd\nat=10s,kill=leader\nmembers=3",
        "etcd\nat=1s,restart=member:1,wait_sync=false\nmembers=3",
        "memcached\nat=2s,kill=primary",
        "redis\nat=3s,kill=master:0\ncluster=3",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn fault(input: &[u8]) -> bool {
    let l = lines(input);
    let _ = kvmeter::plan::Fault::parse(l.get(1).map(String::as_str).unwrap_or(""));
    let mut req = run_request();
    req.store = l[0].clone();
    if !["redis", "etcd", "memcached"].contains(&req.store.as_str()) {
        return false;
    }
    req.duration = Some("60s".into());
    req.faults = l.get(1).cloned().into_iter().collect();
    req.store_opts = l.iter().skip(2).cloned().collect();
    kvmeter::plan::build(&req).is_ok()
}

const ANTAGONIST_DICT: &[&str] = &[
    "io:", "membw:", "cpu:", "bs=", "wr=", "rr=", "n=", "threads=", "gbps=", "share=", "cpus=",
    "duty=", "4k", "512", "4MiB", "0-3", "0/2/5", "0-65535", ",", "-", "/", "\n",
];

fn seeds_antagonist() -> Vec<Vec<u8>> {
    [
        "io:bs=4k,wr=0.3,rr=0.5,n=2",
        "membw:threads=2,gbps=5,cpus=0-1",
        "membw:share=0.5",
        "cpu:threads=1,duty=0.5,cpus=1",
        "cpu:cpus=0/2/5\nio:bs=512",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn antagonist(input: &[u8]) -> bool {
    let mut req = run_request();
    req.duration = Some("10s".into());
    req.antagonists = lines(input);
    kvmeter::plan::build(&req).is_ok()
}

// ---- Experiment and cost TOML ---------------------------------------------------------------

const EXPERIMENT_DICT: &[&str] = &[
    "[experiment]",
    "[settings]",
    "[[step]]",
    "[[figure]]",
    "[[finding]]",
    "[scale.quick]",
    "name",
    "title",
    "paper",
    "store",
    "records",
    "duration",
    "warmup",
    "threads",
    "command",
    "workload",
    "params",
    "repeat",
    "store_opt",
    "per_device",
    "smoke",
    "quick",
    "id",
    "kind",
    "steps",
    "metrics",
    "claim",
    "value",
    "expect",
    "run",
    "sweep",
    "capacity",
    "pressure",
    "suite",
    "fault",
    "=",
    "\"",
    "{",
    "}",
    "[",
    "]",
    ",",
    "\n",
    "last(",
    "{threads:*/",
    "run.throughput_ops_per_s}",
    "> 1",
    "/",
    "*",
    "(",
    ")",
];

fn seeds_experiment() -> Vec<Vec<u8>> {
    let mut v = files_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments"));
    v.extend(files_in(&seed_dir("experiment")));
    v
}

fn experiment(input: &[u8]) -> bool {
    let t = text(input);
    if unsafe_input(&t) {
        return false;
    }
    let scale = ["smoke", "quick", "paper"][input.len() % 3];
    kvmeter::experiment::file::from_text(Path::new("fuzz.toml"), &t, scale, &[]).is_ok()
}

const COST_DICT: &[&str] = &[
    "[demand]",
    "[site]",
    "[[machine]]",
    "ops_per_s",
    "dataset_gb",
    "pue",
    "usd_per_kwh",
    "utilization",
    "name",
    "capacity_ops_per_s",
    "capacity_from",
    "memory_gb",
    "power_load_w",
    "power_idle_w",
    "power_scope",
    "wall_multiplier",
    "power_estimate",
    "price_usd",
    "lifetime_years",
    "\"wall\"",
    "\"psu\"",
    "\"package\"",
    "true",
    "=",
    "\n",
    "\"capacity\"",
];

fn seeds_cost() -> Vec<Vec<u8>> {
    files_in(&seed_dir("cost"))
}

fn cost(input: &[u8]) -> bool {
    thread_local! {
        static FILE: PathBuf = scratch().join(format!("cost-{:?}.toml", std::thread::current().id()));
    }
    FILE.with(|f| {
        if std::fs::write(f, input).is_err() {
            return false;
        }
        let Ok(c) = kvmeter::report::cost::load(f) else {
            return false;
        };
        match kvmeter::report::cost::evaluate(&c, &seed_dir("cost")) {
            Ok(r) => !kvmeter::report::cost::render(&c, &r).is_empty(),
            Err(_) => false,
        }
    })
}
