//! The stages `compile`, `tune` and `costdb tune` share, so that none of them imports
//! another: the TeSA attrs and propagation through the propagation cache ([`sparsify`]), the
//! rewrites and the element type ([`rewrite_in`], passes of `spartac::pipeline`), the cost
//! model, the tune cache as `compile` reads it ([`CompileTuning`]) and the planning of every
//! site ([`plan_graph`], also `plan` and `explain`'s).

use anyhow::{Context, Result};
use spartac::ir::{DType, Graph};
use spartac::pipeline::Pipeline;
use spartac::plan::cost::{CostDb, CostModel};
use spartac::plan::hardware::HardwareProfile;
use spartac::plan::site::find_sites;
use spartac::plan::{plan_site, Plan, PlanOptions};
use spartac::propagate::cache::{cache_key, graph_fingerprint, Lookup, PropagationCache};
use spartac::propagate::PropagateOptions;
use spartac::rewrite::{prepare_in, to_half, RewriteOptions, RewriteReport};
use spartac::tesa::attrs::{apply_attrs, TesaAttrs};
use spartac::tune::{apply_cache, spartac_version, Entry, Target, TuneCache};
use spartac_runtime::cuda::CudaDevice;
use std::path::{Path, PathBuf};

fn read_attrs(tesa: Option<&Path>) -> Result<Option<TesaAttrs>> {
    tesa.map(|path| TesaAttrs::read(path).with_context(|| format!("in {}", path.display()))).transpose()
}

fn apply_and_propagate(graph: &mut Graph, attrs: Option<&TesaAttrs>, propagate: bool) -> Result<()> {
    apply_attrs(graph, attrs)?;
    if propagate {
        spartac::propagate::propagate(graph, &PropagateOptions::default())?;
    }
    Ok(())
}

/// The propagation cache (`spartac::propagate::cache`): `propagate/` under the cache root
/// ($SPARTAC_CACHE_DIR, else ~/.cache/spartac); none when `off` or no root can be named.
pub fn propagation_cache(off: bool) -> Option<PropagationCache> {
    if off {
        return None;
    }
    spartac_runtime::exec::cache_root().map(|root| PropagationCache::new(root.join("propagate")))
}

/// What [`sparsify`] did.
#[derive(Debug, Default)]
pub struct Sparsified {
    /// The TeSAs came from the propagation cache.
    pub cached: bool,
    /// One line each: a damaged entry recomputed, an entry that could not be written.
    pub warnings: Vec<String>,
}

/// The TeSA attrs file applied (every weight pruned where zero without one), then propagation
/// unless `propagate` is false: the first stages `compile` and `tune` share. With a `cache`, the
/// result is its entry for the graph loaded from `model` (the file's bytes and the graph), the
/// attrs and `propagate` when it holds one; else the stages run and their result is stored. A
/// damaged entry is recomputed and an unwritable cache skipped, each with a warning; neither is
/// an error.
pub fn sparsify(
    graph: &mut Graph,
    model: &Path,
    tesa: Option<&Path>,
    propagate: bool,
    cache: Option<&PropagationCache>,
) -> Result<Sparsified> {
    let attrs = read_attrs(tesa)?;
    let mut done = Sparsified::default();
    let Some(cache) = cache else {
        apply_and_propagate(graph, attrs.as_ref(), propagate)?;
        return Ok(done);
    };
    let bytes = spartac::contained::read_regular(model).with_context(|| format!("reading {}", model.display()))?;
    let fingerprint = graph_fingerprint(&bytes, graph);
    drop(bytes);
    let key = cache_key(fingerprint, attrs.as_ref(), propagate, &PropagateOptions::default());
    match cache.load(&key, graph) {
        Lookup::Hit => {
            done.cached = true;
            return Ok(done);
        }
        Lookup::Miss => {}
        Lookup::Damaged(why) => done
            .warnings
            .push(format!("propagation cache entry {} unusable ({why}), recomputing", cache.path_of(&key).display())),
    }
    apply_and_propagate(graph, attrs.as_ref(), propagate)?;
    if let Err(e) = cache.store(&key, graph) {
        done.warnings.push(format!("propagation cache skipped: {e}"));
    }
    Ok(done)
}

/// The rewrites before the plan (`spartac::rewrite`), then the model's element type (`f32`,
/// `f16` or `bf16`, as `--dtype` takes it).
pub fn rewrite(graph: &mut Graph, options: &RewriteOptions, dtype: &str) -> Result<RewriteReport> {
    rewrite_in(graph, options, dtype, &mut Pipeline::quiet())
}

/// [`rewrite`], each rewrite and `to_half` a pass of `pipeline`.
pub fn rewrite_in(
    graph: &mut Graph,
    options: &RewriteOptions,
    dtype: &str,
    pipeline: &mut Pipeline,
) -> Result<RewriteReport> {
    let report = prepare_in(graph, options, pipeline)?;
    let half = match dtype {
        "f16" => Some(DType::F16),
        "bf16" => Some(DType::BF16),
        _ => None,
    };
    pipeline.run("to_half", graph, |g| match half {
        Some(t) => {
            let r = to_half(g, t)?;
            Ok(((), format!("{} values and {} constants to {}", r.values, r.constants, t.name())))
        }
        None => Ok(((), format!("off ({dtype})"))),
    })?;
    Ok(report)
}

/// The cost model: the cost DB at `path`, else the built-in sm_90 one.
pub fn cost_model(path: Option<&Path>) -> Result<CostModel> {
    Ok(match path {
        Some(p) => {
            let text = spartac::contained::read_regular_text(p).with_context(|| format!("reading {}", p.display()))?;
            let db = CostDb::parse(&text).with_context(|| format!("in {}", p.display()))?;
            CostModel::new(HardwareProfile::sm_90(), db)?
        }
        None => CostModel::sm_90(),
    })
}

/// The default cache folder: `tune/` under the runtime's cache root.
pub fn default_cache_dir() -> Option<PathBuf> {
    spartac_runtime::exec::cache_root().map(|r| r.join("tune"))
}

/// The tuning cache as `spartac compile` uses it: the refitted cost DB when there is one (and
/// no `--costdb`), and the measured winners for the GPU it runs on.
pub struct CompileTuning {
    cache: Option<TuneCache>,
    costdb: Option<String>,
}

impl CompileTuning {
    /// Opens `dir` (default: the default cache folder, when it exists) and puts its refitted
    /// cost DB into `opts` unless `costdb_given`.
    pub fn open(dir: Option<&Path>, costdb_given: bool, opts: &mut PlanOptions) -> Result<CompileTuning> {
        let dir = match dir {
            Some(d) => d.to_path_buf(),
            None => match default_cache_dir().filter(|d| d.is_dir()) {
                Some(d) => d,
                None => return Ok(CompileTuning { cache: None, costdb: None }),
            },
        };
        let cache = TuneCache::new(dir);
        let mut costdb = None;
        let path = cache.costdb_path();
        if !costdb_given && path.is_file() {
            opts.cost = cost_model(Some(&path))?;
            costdb = Some(format!("cost DB {} ({})", path.display(), opts.cost.db.source));
        }
        Ok(CompileTuning { cache: Some(cache), costdb })
    }

    /// Replans the operators of `plan` that have a usable entry for this GPU (or, without one
    /// here, for the one GPU the cache holds entries of); returns the summary line.
    pub fn apply(&self, graph: &spartac::ir::Graph, plan: &mut Plan, opts: &PlanOptions) -> Result<String> {
        let Some(cache) = &self.cache else { return Ok("no tune cache".into()) };
        let (entries, damaged) = cache.entries();
        for d in &damaged {
            eprintln!("warning: damaged tune cache entry ignored: {d}");
        }
        let version = spartac_version();
        let entries: Vec<Entry> = entries.into_iter().filter(|e| e.version == version).collect();
        let mut line = if entries.is_empty() {
            format!("no entries in {}", cache.dir().display())
        } else {
            let target = match CudaDevice::open(0) {
                Ok(dev) => Some(Target { arch: dev.arch().to_string(), device: dev.name().to_string() }),
                Err(_) => {
                    let first = &entries[0].target;
                    entries.iter().all(|e| &e.target == first).then(|| first.clone())
                }
            };
            match target {
                Some(t) => {
                    let a = apply_cache(graph, plan, opts, &entries, &t)?;
                    format!(
                        "{} of {} operators from {} ({t}; {} differ from the model's choice)",
                        a.from_cache,
                        plan.operators.len(),
                        cache.dir().display(),
                        a.changed
                    )
                }
                None => format!("not used: no GPU here and {} holds entries of several GPUs", cache.dir().display()),
            }
        };
        if let Some(c) = &self.costdb {
            line += &format!("; {c}");
        }
        Ok(line)
    }
}

/// Plans every site, with a progress bar on a terminal.
pub(crate) fn plan_graph(graph: &Graph, opts: &PlanOptions) -> Result<Plan> {
    let sites = find_sites(graph);
    let bar = indicatif::ProgressBar::new(sites.len() as u64).with_message("planning");
    let mut operators = vec![];
    for site in &sites {
        operators.push(plan_site(graph, site, opts)?);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(Plan { arch: opts.cost.hw.arch.to_string(), operators })
}
