//! YCSB's core workload properties → a validated `WorkloadConfig` (ycsb-workload-spec §2–§6),
//! and a run phase's open-loop settings (`rate`, `arrival`). Each check names the property,
//! its source and what was expected; combinations YCSB would fail on at run time (proportions
//! that do not add up, an empty hotspot set) are refused here instead.

use super::props::Props;
use super::{Arrival, OpenLoop};
use crate::error::UsageError;
use crate::workload::generators::HistogramLengths;
use crate::workload::{Distribution, FieldLengthDistribution, KeySizeDistribution, WorkloadConfig};

/// The open-loop settings of a run phase, from the `rate` and `arrival` properties.
pub(super) fn open_loop(p: &Props) -> Result<Option<OpenLoop>, UsageError> {
    let arrival = match p
        .get("arrival")
        .map(|v| v.value.trim().to_ascii_lowercase())
    {
        None => None,
        Some(a) if a == "fixed" => Some(Arrival::Fixed),
        Some(a) if a == "poisson" => Some(Arrival::Poisson),
        Some(a) if a == "fb_ia" => Some(Arrival::FbIa),
        Some(_) => return Err(p.bad("arrival", "fixed, poisson or fb_ia")),
    };
    if let Some(sine) = super::models::sine(p)? {
        // mixgraph's sine is the offered load: no --rate beside it.
        if let Some(r) = p.get("rate") {
            return Err(UsageError::new(format!(
                "{}: 'rate' and mixgraph.sine_mix_rate=true both set the offered load: drop --rate (the sine's mean is sine_d) or set mixgraph.sine_mix_rate=false",
                r.source
            )));
        }
        if arrival == Some(Arrival::FbIa) {
            return Err(p.bad(
                "arrival",
                "fixed or poisson with mixgraph.sine_mix_rate=true (fb_ia has its own gaps)",
            ));
        }
        return Ok(Some(OpenLoop {
            arrival: arrival.unwrap_or(Arrival::Poisson),
            rate: sine.d,
            offset_gaps: 0.0,
            sine: Some(sine),
        }));
    }
    let Some(_) = p.get("rate") else {
        if arrival.is_some() {
            let src = &p.get("arrival").expect("checked").source;
            return Err(UsageError::new(format!(
                "{src}: 'arrival' needs an offered load: give --rate R (operations per second)"
            )));
        }
        return Ok(None);
    };
    let rate = p.float("rate", 0.0)?;
    if rate <= 0.0 {
        return Err(p.bad("rate", "a positive offered load in operations per second"));
    }
    if rate > 1e9 {
        return Err(p.bad("rate", "at most 1e9 operations per second"));
    }
    Ok(Some(OpenLoop {
        arrival: arrival.unwrap_or(Arrival::Poisson),
        rate,
        offset_gaps: 0.0,
        sine: None,
    }))
}

/// Record and operation counts (§2).
struct Counts {
    recordcount: i64,
    operationcount: i64,
    insertstart: i64,
    insertcount: i64,
}

fn counts(p: &Props) -> Result<Counts, UsageError> {
    let recordcount = p.int("recordcount", 0)?;
    if recordcount < 1 {
        return Err(p.bad("recordcount", "a whole number ≥ 1"));
    }
    let operationcount = p.int("operationcount", 0)?;
    if operationcount < 0 {
        return Err(p.bad(
            "operationcount",
            "a whole number ≥ 0 (0 = until the duration ends)",
        ));
    }
    let insertstart = p.int("insertstart", 0)?;
    if insertstart < 0 {
        return Err(p.bad("insertstart", "a whole number ≥ 0"));
    }
    if !p.has("insertcount") && insertstart >= recordcount {
        // insertcount defaults to recordcount - insertstart, which would be < 1.
        return Err(p.bad(
            "insertstart",
            &format!(
                "a whole number below recordcount ({recordcount}) when insertcount is not set"
            ),
        ));
    }
    let insertcount = p.int("insertcount", recordcount - insertstart)?;
    if insertcount < 1 {
        return Err(p.bad("insertcount", "a whole number ≥ 1"));
    }
    if insertstart
        .checked_add(insertcount)
        .is_none_or(|end| recordcount < end)
    {
        return Err(UsageError::new(format!(
            "recordcount ({recordcount}, {}) must be ≥ insertstart ({insertstart}) + insertcount ({insertcount}); raise recordcount or lower insertcount",
            p.get("recordcount").map(|v| v.source.as_str()).unwrap_or("default")
        )));
    }
    Ok(Counts {
        recordcount,
        operationcount,
        insertstart,
        insertcount,
    })
}

/// Field count and value lengths (§3).
struct Fields {
    fieldcount: i64,
    fieldlength: i32,
    minfieldlength: i32,
    distribution: FieldLengthDistribution,
    histogram_file: String,
    histogram: Option<HistogramLengths>,
}

fn fields(p: &Props) -> Result<Fields, UsageError> {
    // A mixgraph value is one value: one field unless the user asks for more.
    let default_fields = if super::models::is_mixgraph(p) { 1 } else { 10 };
    let fieldcount = p.int("fieldcount", default_fields)?;
    if !(1..=65535).contains(&fieldcount) {
        return Err(p.bad("fieldcount", "a whole number from 1 to 65535"));
    }
    let fieldlength = p.int32("fieldlength", 100)?;
    if fieldlength < 0 {
        return Err(p.bad("fieldlength", "a whole number ≥ 0"));
    }
    let minfieldlength = p.int32("minfieldlength", 1)?;
    // `valuesizedistribution` (kvmeter's name for Facebook ETC's sizes) overrides it.
    let name = if p.has("valuesizedistribution") {
        "valuesizedistribution"
    } else {
        "fieldlengthdistribution"
    };
    let distribution = match p.string(name, "constant").as_str() {
        "constant" => FieldLengthDistribution::Constant,
        "uniform" => FieldLengthDistribution::Uniform,
        "zipfian" => FieldLengthDistribution::Zipfian,
        "histogram" => FieldLengthDistribution::Histogram,
        "fb_value" => FieldLengthDistribution::FbValue,
        _ => return Err(p.bad(name, "constant, uniform, zipfian, histogram or fb_value")),
    };
    if matches!(
        distribution,
        FieldLengthDistribution::Uniform | FieldLengthDistribution::Zipfian
    ) && !(0..=fieldlength).contains(&minfieldlength)
    {
        return Err(p.bad(
            "minfieldlength",
            &format!("a length from 0 to fieldlength ({fieldlength})"),
        ));
    }
    let histogram_file = p.string("fieldlengthhistogram", "hist.txt");
    let histogram = if distribution == FieldLengthDistribution::Histogram {
        let text = std::fs::read_to_string(&histogram_file).map_err(|e| {
            UsageError::new(format!(
                "fieldlengthhistogram '{histogram_file}': cannot read it: {e}"
            ))
        })?;
        Some(HistogramLengths::parse(&text).map_err(|e| {
            UsageError::new(format!("fieldlengthhistogram '{histogram_file}': {e}"))
        })?)
    } else {
        None
    };
    Ok(Fields {
        fieldcount,
        fieldlength,
        minfieldlength,
        distribution,
        histogram_file,
        histogram,
    })
}

/// read, update, insert, scan and read-modify-write proportions, which must add up to 1 (§5).
fn proportions(p: &Props) -> Result<[f64; 5], UsageError> {
    let mut sum = 0.0;
    let mut out = [0.0; 5];
    let names = [
        ("readproportion", 0.95),
        ("updateproportion", 0.05),
        ("insertproportion", 0.0),
        ("scanproportion", 0.0),
        ("readmodifywriteproportion", 0.0),
    ];
    for (i, (k, d)) in names.iter().enumerate() {
        let v = p.float(k, *d)?;
        if v < 0.0 {
            return Err(p.bad(k, "a proportion ≥ 0"));
        }
        out[i] = v;
        sum += v;
    }
    if (sum - 1.0).abs() > 1e-6 {
        return Err(UsageError::new(format!(
            "the operation proportions (read {}, update {}, insert {}, scan {}, readmodifywrite {}) add up to {sum}: expected 1; adjust them so they sum to 1",
            out[0], out[1], out[2], out[3], out[4]
        )));
    }
    Ok(out)
}

/// The request distribution's own settings (§4): hotspot sets that are not empty where
/// they are drawn from, enough records for `latest`, a percentile for `exponential`.
fn check_distribution(
    p: &Props,
    d: Distribution,
    c: &Counts,
    hot: (f64, f64),
) -> Result<(), UsageError> {
    let (hotspotdatafraction, hotspotopnfraction) = hot;
    if d == Distribution::Hotspot {
        for k in ["hotspotdatafraction", "hotspotopnfraction"] {
            let v = p.float(k, 0.0)?;
            if p.has(k) && !(0.0..=1.0).contains(&v) {
                return Err(p.bad(k, "a fraction from 0 to 1"));
            }
        }
        let hot = (c.insertcount as f64 * hotspotdatafraction) as i32 as i64;
        let cold = c.insertcount - hot;
        if (hot == 0 && hotspotopnfraction > 0.0) || (cold == 0 && hotspotopnfraction < 1.0) {
            return Err(UsageError::new(format!(
                "hotspot: hotspotdatafraction {hotspotdatafraction} of {} keys leaves an empty {} set that hotspotopnfraction {hotspotopnfraction} still draws from; change one of them",
                c.insertcount,
                if hot == 0 { "hot" } else { "cold" }
            )));
        }
    }
    if d == Distribution::Latest && c.recordcount < 2 {
        return Err(p.bad("recordcount", "at least 2 for requestdistribution=latest"));
    }
    let percentile = p.float("exponential.percentile", 95.0)?;
    if d == Distribution::Exponential && !(percentile > 0.0 && percentile < 100.0) {
        return Err(p.bad("exponential.percentile", "a percentile between 0 and 100"));
    }
    Ok(())
}

/// `keysizedistribution`: YCSB's names or Facebook ETC's sizes.
fn key_sizes(p: &Props) -> Result<KeySizeDistribution, UsageError> {
    match p.string("keysizedistribution", "ycsb").trim() {
        "ycsb" => Ok(KeySizeDistribution::Ycsb),
        "fb_key" => Ok(KeySizeDistribution::FbKey),
        _ => Err(p.bad(
            "keysizedistribution",
            "ycsb (user… names) or fb_key (Facebook ETC's key sizes)",
        )),
    }
}

/// A mixgraph run's YCSB-facing settings: its ratios as the proportions (get → read, put →
/// update, seek → scan) and its scan bound, so every reader of the config (the op list,
/// max_reply, reports) sees the mix the model draws; its value sizes unless another
/// distribution was asked for.
fn apply_mixgraph(p: &Props, w: &mut WorkloadConfig) {
    let Some(m) = w.mixgraph.as_ref() else {
        return;
    };
    let sum = m.mix_get_ratio + m.mix_put_ratio + m.mix_seek_ratio;
    w.readproportion = m.mix_get_ratio / sum;
    w.updateproportion = m.mix_put_ratio / sum;
    w.scanproportion = m.mix_seek_ratio / sum;
    w.insertproportion = 0.0;
    w.readmodifywriteproportion = 0.0;
    w.minscanlength = 1;
    w.maxscanlength = m.mix_max_scan_len.min(i32::MAX as i64) as i32;
    if !p.has("fieldlengthdistribution") && !p.has("valuesizedistribution") {
        w.fieldlengthdistribution = FieldLengthDistribution::Mixgraph;
    }
}

pub(super) fn config(p: &Props, warnings: &mut Vec<String>) -> Result<WorkloadConfig, UsageError> {
    let mut w = core_config(p, warnings)?;
    w.keysizedistribution = key_sizes(p)?;
    w.mixgraph = super::models::mixgraph(p)?;
    apply_mixgraph(p, &mut w);
    Ok(w)
}

fn core_config(p: &Props, warnings: &mut Vec<String>) -> Result<WorkloadConfig, UsageError> {
    let c = counts(p)?;
    let f = fields(p)?;
    let dataintegrity = p.boolean("dataintegrity", false, warnings);
    if dataintegrity && f.distribution != FieldLengthDistribution::Constant {
        return Err(UsageError::new(
            "dataintegrity=true needs fieldlengthdistribution=constant (values must have a known size to be checked)",
        ));
    }
    let proportions = proportions(p)?;
    let rd_name = p.string("requestdistribution", "uniform");
    let requestdistribution = Distribution::parse(&rd_name).ok_or_else(|| {
        p.bad(
            "requestdistribution",
            "uniform, zipfian, latest, hotspot, sequential or exponential",
        )
    })?;
    let minscanlength = p.int32("minscanlength", 1)?;
    let maxscanlength = p.int32("maxscanlength", 1000)?;
    if proportions[3] > 0.0 && !(minscanlength >= 1 && minscanlength <= maxscanlength) {
        return Err(UsageError::new(format!(
            "minscanlength ({minscanlength}) and maxscanlength ({maxscanlength}): expected 1 ≤ minscanlength ≤ maxscanlength"
        )));
    }
    let scanlengthdistribution = p.string("scanlengthdistribution", "uniform");
    if scanlengthdistribution != "uniform" && scanlengthdistribution != "zipfian" {
        return Err(p.bad("scanlengthdistribution", "uniform or zipfian"));
    }
    let insertorder = p.string("insertorder", "hashed");
    if insertorder != "hashed" && insertorder != "ordered" {
        warnings.push(format!(
            "insertorder '{insertorder}' is read as ordered (YCSB treats anything but 'hashed' as ordered)"
        ));
    }
    let hot = (
        p.float("hotspotdatafraction", 0.2)?,
        p.float("hotspotopnfraction", 0.8)?,
    );
    check_distribution(p, requestdistribution, &c, hot)?;
    let retry_limit = p.int32("core_workload_insertion_retry_limit", 0)?;
    let retry_interval = p.int32("core_workload_insertion_retry_interval", 3)?;
    if retry_limit < 0 || retry_interval < 0 {
        return Err(UsageError::new(
            "core_workload_insertion_retry_limit and _interval: expected whole numbers ≥ 0",
        ));
    }
    Ok(WorkloadConfig {
        table: p.string("table", "usertable"),
        fieldcount: f.fieldcount,
        fieldnameprefix: p.string("fieldnameprefix", "field"),
        fieldlength: f.fieldlength,
        minfieldlength: f.minfieldlength,
        fieldlengthdistribution: f.distribution,
        fieldlengthhistogram: f.histogram_file,
        fieldlength_histogram: f.histogram,
        readallfields: p.boolean("readallfields", true, warnings),
        readallfieldsbyname: p.boolean("readallfieldsbyname", false, warnings),
        writeallfields: p.boolean("writeallfields", false, warnings),
        dataintegrity,
        readproportion: proportions[0],
        updateproportion: proportions[1],
        insertproportion: proportions[2],
        scanproportion: proportions[3],
        readmodifywriteproportion: proportions[4],
        requestdistribution,
        minscanlength,
        maxscanlength,
        scanlengthdistribution,
        insertorder,
        insertstart: c.insertstart,
        insertcount: c.insertcount,
        zeropadding: p.int32("zeropadding", 1)?,
        hotspotdatafraction: hot.0,
        hotspotopnfraction: hot.1,
        exponential_percentile: p.float("exponential.percentile", 95.0)?,
        exponential_frac: p.float("exponential.frac", 0.8571428571)?,
        recordcount: c.recordcount,
        operationcount: c.operationcount,
        insertion_retry_limit: retry_limit,
        insertion_retry_interval: retry_interval,
        insert_stride: 1,
        insert_offset: 0,
        keysizedistribution: KeySizeDistribution::Ycsb,
        mixgraph: None,
    })
}
