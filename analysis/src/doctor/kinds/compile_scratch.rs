//! Compile-time memory: XLA's GPU autotuner profiles candidate kernels with scratch
//! buffers taken from the same pool as the program's arrays; when every candidate's
//! scratch is declined, the compile fails. The arguments the pool already held are
//! what left too little room.

use super::{exact, Ctx};
use crate::doctor::verdict::{Cite, Fix, Kind, Verdict, When};
use crate::size::format_bytes as b;

pub fn verdict(ctx: &Ctx<'_>) -> Option<Verdict> {
    let f = ctx.failure?;
    let mut v = ctx.base(Kind::CompileScratch);
    let auto = ctx.log.autotune_failures.last();
    // The module whose compile failed: the dump has its HLO but no buffer assignment.
    let module = ctx
        .dump
        .and_then(|d| d.uncompiled.iter().max_by_key(|m| m.id));
    if let Some(m) = module {
        v.who.executable = Some(m.name.clone());
        v.evidence.push(Cite {
            file: m.file.display().to_string(),
            line: None,
            what: format!(
                "{} was dumped before optimization only: its compile did not finish",
                m.name
            ),
        });
    }
    if let Some(a) = auto {
        v.who.hlo_instruction = a.instruction.clone();
        v.who.op_name = a.op_name.clone();
        // The op's source line: the instruction of the module with that op_name.
        if let (Some(m), Some(op)) = (module, &a.op_name) {
            let mut hits: Vec<_> = m
                .hlo
                .instructions
                .values()
                .filter(|i| i.op_name.as_deref() == Some(op.as_str()) && i.source_line.is_some())
                .collect();
            hits.sort_by_key(|i| i.line);
            if let Some(i) = hits.first() {
                v.who.source = Some(format!(
                    "{}:{}",
                    i.source_file.as_deref().unwrap_or("?"),
                    i.source_line.unwrap_or(0)
                ));
            }
        }
    }
    let pool = ctx.pool_state();
    let pool_bytes = pool.pool.or(pool.limit);
    let args = module.and_then(|m| m.argument_bytes);
    if let Some(r) = f.request {
        v.figures.insert("request_bytes".into(), r);
    }
    if let Some(p) = pool_bytes {
        v.figures.insert("pool_bytes".into(), p);
    }
    if let Some(a) = args {
        v.figures.insert("argument_bytes".into(), a);
    }
    if let Some(u) = pool.in_use {
        v.figures.insert("in_use_bytes".into(), u);
    }
    v.evidence.extend(pool.cites.clone());
    let exe = v
        .who
        .executable
        .clone()
        .unwrap_or_else(|| "the executable".into());
    let stage = if f.when == When::Autotuning {
        "autotuning"
    } else {
        "compiling"
    };
    v.headline = format!(
        "Compiling {exe} ran out of memory while {stage}{}: the pool held {} and had no room for {} of scratch.",
        v.who
            .hlo_instruction
            .as_deref()
            .map(|i| format!(" {i}"))
            .unwrap_or_default(),
        pool.in_use.map_or("its arrays".into(), b),
        f.request.map_or("the autotuner's".into(), b)
    );
    v.why = format!(
        "XLA profiles candidate kernels with scratch buffers from the same pool{}; {} already held {}{} and every candidate's request{} was declined, so no config was found and the compile failed. Not an execute-time shortage: the compiled program never ran.",
        pool_bytes.map(|p| format!(" ({})", exact(p))).unwrap_or_default(),
        "the pool",
        pool.in_use.map_or("the arguments".into(), exact),
        args.map(|a| format!(" ({exe}'s arguments are {})", b(a)))
            .unwrap_or_default(),
        f.request.map(|r| format!(" of {}", b(r))).unwrap_or_default()
    );
    // The fix: a pool with room for what was live plus the scratch, checked by
    // replaying the run's buffers and the request through the BFC model.
    // What the autotuner asks for at once: a copy of each operand and the output, each
    // with a redzone on both sides (XLA's RedzoneBuffers); the failed request is one of
    // them. Used when the log names the shapes and the request is one of them.
    let redzone = redzone_bytes(ctx);
    let scratch: Vec<u64> = auto
        .map(|a| {
            a.operand_shapes
                .iter()
                .chain(a.shape.iter())
                .filter_map(|s| crate::doctor::evidence::shape_bytes(s))
                .map(|n| n + 2 * redzone)
                .collect()
        })
        .unwrap_or_default();
    let consistent = f.request.is_some_and(|r| {
        scratch
            .iter()
            .any(|s| crate::doctor::failure::approx_matches(r, *s))
    });
    let requests: Vec<u64> = if consistent {
        scratch.clone()
    } else {
        f.request.into_iter().collect()
    };
    if consistent {
        v.figures
            .insert("scratch_bytes".into(), scratch.iter().sum::<u64>());
    }
    let sized = (!requests.is_empty())
        .then(|| ctx.sized_pool(&requests, true))
        .flatten();
    let check = sized.as_ref().map(|sp| sp.check());
    let sized = sized
        .map(|sp| {
            format!(
                "give the pool room for the arguments and the scratch: {}; ",
                sp.advice()
            )
        })
        .unwrap_or_default();
    v.fix = Fix {
        advice: format!(
            "{sized}or compile before the large arrays exist (jax.jit(f).lower(jax.ShapeDtypeStruct(...)).compile()), or limit autotuning (XLA_FLAGS=--xla_gpu_autotune_level=0 skips the profiling that needs the scratch)."
        ),
        check,
    };
    Some(v)
}

/// XLA's redzone on each side of an autotuning buffer: `--xla_gpu_redzone_padding_bytes`
/// in the run's XLA_FLAGS, else its default (8 MiB).
fn redzone_bytes(ctx: &Ctx<'_>) -> u64 {
    ctx.ev
        .run
        .env
        .get("XLA_FLAGS")
        .and_then(|f| {
            f.split_whitespace()
                .find_map(|w| w.strip_prefix("--xla_gpu_redzone_padding_bytes="))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(8 << 20)
}
