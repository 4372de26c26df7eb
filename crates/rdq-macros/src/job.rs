//! Expansion of `#[derive(Job)]`: a payload type bound to one queue of an
//! application's queue set, under a stable name checked at compile time.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{DeriveInput, Lit, LitStr, Path};

use crate::names::{name_problem, snake_case};

/// Parsed `#[job(...)]` options.
#[derive(Default)]
struct JobAttr {
    queue: Option<Path>,
    name: Option<LitStr>,
    version: Option<LitStr>,
    retry: Option<RetrySpec>,
}

/// Parsed `retry(...)`: a compiled-in retry policy for the job type.
struct RetrySpec {
    max_attempts: u32,
    backoff: Option<BackoffSpec>,
}

enum BackoffSpec {
    None,
    Fixed {
        delay_ms: u64,
    },
    Exponential {
        base_ms: u64,
        factor: f64,
        cap_ms: u64,
        jitter: bool,
    },
}

fn parse_job_attr(input: &DeriveInput) -> syn::Result<JobAttr> {
    let mut parsed = JobAttr::default();
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("job")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("queue") {
                once(&meta, parsed.queue.is_some())?;
                parsed.queue = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("name") {
                once(&meta, parsed.name.is_some())?;
                let lit: LitStr = meta.value()?.parse()?;
                if let Some(why) = name_problem(&lit.value()) {
                    return Err(syn::Error::new(
                        lit.span(),
                        format!(
                            "job name {:?} {why}; a job name is the envelope's handler_ref: \
                             1-240 characters of [a-z0-9._-]",
                            lit.value()
                        ),
                    ));
                }
                parsed.name = Some(lit);
            } else if meta.path.is_ident("version") {
                once(&meta, parsed.version.is_some())?;
                let lit: LitStr = meta.value()?.parse()?;
                if lit.value().is_empty() {
                    return Err(syn::Error::new(lit.span(), "`version` must not be empty"));
                }
                parsed.version = Some(lit);
            } else if meta.path.is_ident("retry") {
                once(&meta, parsed.retry.is_some())?;
                parsed.retry = Some(parse_retry(&meta)?);
            } else {
                return Err(meta.error(
                    "unknown key in `#[job(...)]`; expected `queue`, `name`, `version` or `retry`",
                ));
            }
            Ok(())
        })?;
    }
    Ok(parsed)
}

fn once(meta: &ParseNestedMeta, seen: bool) -> syn::Result<()> {
    if seen {
        Err(meta.error("this key is given twice"))
    } else {
        Ok(())
    }
}

fn int<T: std::str::FromStr>(meta: &ParseNestedMeta) -> syn::Result<T>
where
    T::Err: std::fmt::Display,
{
    match meta.value()?.parse::<Lit>()? {
        Lit::Int(i) => i.base10_parse(),
        other => Err(syn::Error::new(other.span(), "expected an integer")),
    }
}

fn parse_retry(meta: &ParseNestedMeta) -> syn::Result<RetrySpec> {
    let span = meta.path.span();
    let mut max_attempts: Option<u32> = None;
    let mut kind: Option<LitStr> = None;
    let mut delay_ms: Option<u64> = None;
    let mut base_ms: Option<u64> = None;
    let mut factor: Option<f64> = None;
    let mut cap_ms: Option<u64> = None;
    let mut jitter: Option<bool> = None;
    meta.parse_nested_meta(|m| {
        if m.path.is_ident("max_attempts") {
            let n: u32 = int(&m)?;
            if n == 0 {
                return Err(m.error("`max_attempts` counts the first attempt, so it is at least 1"));
            }
            max_attempts = Some(n);
        } else if m.path.is_ident("backoff") {
            let lit: LitStr = m.value()?.parse()?;
            if !matches!(lit.value().as_str(), "none" | "fixed" | "exponential") {
                return Err(syn::Error::new(
                    lit.span(),
                    "`backoff` is \"none\", \"fixed\" or \"exponential\"",
                ));
            }
            kind = Some(lit);
        } else if m.path.is_ident("delay_ms") {
            delay_ms = Some(int(&m)?);
        } else if m.path.is_ident("base_ms") {
            base_ms = Some(int(&m)?);
        } else if m.path.is_ident("cap_ms") {
            cap_ms = Some(int(&m)?);
        } else if m.path.is_ident("factor") {
            let value = match m.value()?.parse::<Lit>()? {
                Lit::Float(f) => f.base10_parse::<f64>()?,
                Lit::Int(i) => i.base10_parse::<f64>()?,
                other => return Err(syn::Error::new(other.span(), "expected a number")),
            };
            if !(value.is_finite() && value >= 1.0) {
                return Err(m.error("`factor` must be at least 1.0"));
            }
            factor = Some(value);
        } else if m.path.is_ident("jitter") {
            match m.value()?.parse::<Lit>()? {
                Lit::Bool(b) => jitter = Some(b.value),
                other => return Err(syn::Error::new(other.span(), "expected `true` or `false`")),
            }
        } else {
            return Err(m.error(
                "unknown key in `retry(...)`; expected `max_attempts`, `backoff`, `delay_ms`, \
                 `base_ms`, `factor`, `cap_ms` or `jitter`",
            ));
        }
        Ok(())
    })?;
    let max_attempts = max_attempts
        .ok_or_else(|| syn::Error::new(span, "`retry(...)` needs `max_attempts = N`"))?;
    let exponential_keys = base_ms.is_some() || factor.is_some() || cap_ms.is_some();
    let kind_name = kind.as_ref().map(LitStr::value);
    let backoff = match kind_name.as_deref() {
        None if delay_ms.is_some() || exponential_keys || jitter.is_some() => {
            return Err(syn::Error::new(
                span,
                "say which curve these keys belong to: `backoff = \"fixed\"` or `\"exponential\"`",
            ));
        }
        None => None,
        Some("none") if delay_ms.is_some() || exponential_keys || jitter.is_some() => {
            return Err(syn::Error::new(
                span,
                "`backoff = \"none\"` takes no other keys",
            ));
        }
        Some("none") => Some(BackoffSpec::None),
        Some("fixed") if exponential_keys || jitter.is_some() => {
            return Err(syn::Error::new(
                span,
                "`backoff = \"fixed\"` takes only `delay_ms`",
            ));
        }
        Some("fixed") => Some(BackoffSpec::Fixed {
            delay_ms: delay_ms
                .ok_or_else(|| syn::Error::new(span, "`backoff = \"fixed\"` needs `delay_ms`"))?,
        }),
        Some(_) if delay_ms.is_some() => {
            return Err(syn::Error::new(
                span,
                "`delay_ms` belongs to `backoff = \"fixed\"`; exponential uses `base_ms`",
            ));
        }
        Some(_) => {
            let base_ms = base_ms.unwrap_or(1_000);
            let cap_ms = cap_ms.unwrap_or(3_600_000);
            if cap_ms < base_ms {
                return Err(syn::Error::new(span, "`cap_ms` must be at least `base_ms`"));
            }
            Some(BackoffSpec::Exponential {
                base_ms,
                factor: factor.unwrap_or(2.0),
                cap_ms,
                jitter: jitter.unwrap_or(true),
            })
        }
    };
    Ok(RetrySpec {
        max_attempts,
        backoff,
    })
}

impl RetrySpec {
    fn to_tokens(&self) -> TokenStream {
        let max_attempts = self.max_attempts;
        let backoff = self.backoff.as_ref().map(|b| {
            let curve = match b {
                BackoffSpec::None => quote!(::rdq::Backoff::None),
                BackoffSpec::Fixed { delay_ms } => {
                    quote!(::rdq::Backoff::Fixed { delay_ms: #delay_ms })
                }
                BackoffSpec::Exponential {
                    base_ms,
                    factor,
                    cap_ms,
                    jitter,
                } => quote!(::rdq::Backoff::Exponential {
                    base_ms: #base_ms,
                    factor: #factor,
                    cap_ms: #cap_ms,
                    jitter: #jitter,
                }),
            };
            quote!(.with_backoff(#curve))
        });
        quote!(::rdq::RetryPolicy::attempts(#max_attempts) #backoff)
    }
}

/// Everything before the last segment of `AppQueues::Emails`: the queue set type.
fn queue_set_of(path: &Path) -> syn::Result<Path> {
    if path.segments.len() < 2 {
        return Err(syn::Error::new(
            path.span(),
            "`queue` names a variant of the application's queue set, such as `AppQueues::Emails`",
        ));
    }
    let mut set = path.clone();
    set.segments.pop();
    set.segments.pop_punct();
    Ok(set)
}

/// Expands `#[derive(Job)]`.
pub(crate) fn derive(input: &DeriveInput) -> syn::Result<TokenStream> {
    if !input.generics.params.is_empty() || input.generics.where_clause.is_some() {
        return Err(syn::Error::new(
            input.generics.span(),
            "a job type cannot be generic: its name must be one stable string",
        ));
    }
    let attr = parse_job_attr(input)?;
    let ident = &input.ident;
    let queue = attr.queue.as_ref().ok_or_else(|| {
        syn::Error::new(
            ident.span(),
            "#[derive(Job)] needs `#[job(queue = AppQueues::Variant)]`",
        )
    })?;
    let queue_set = queue_set_of(queue)?;
    let name = match &attr.name {
        Some(lit) => lit.clone(),
        None => {
            let derived = snake_case(&ident.to_string());
            if let Some(why) = name_problem(&derived) {
                return Err(syn::Error::new(
                    ident.span(),
                    format!(
                        "the default job name {derived:?} {why}; set one with \
                         `#[job(name = \"...\")]` using [a-z0-9._-]"
                    ),
                ));
            }
            LitStr::new(&derived, Span::call_site())
        }
    };
    let version = match &attr.version {
        Some(v) => quote!(::core::option::Option::Some(#v)),
        None => quote!(::core::option::Option::None),
    };
    let retry = attr.retry.as_ref().map(|spec| {
        let policy = spec.to_tokens();
        quote! {
            fn retry_policy() -> ::core::option::Option<::rdq::RetryPolicy> {
                ::core::option::Option::Some(#policy)
            }
        }
    });
    Ok(quote! {
        #[automatically_derived]
        impl ::rdq::Job for #ident {
            type Queue = #queue_set;
            const NAME: &'static ::core::primitive::str = #name;
            const QUEUE: Self::Queue = #queue;
            const VERSION: ::core::option::Option<&'static ::core::primitive::str> = #version;
            #retry
        }
    })
}
