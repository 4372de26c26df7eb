//! Expansion of `#[derive(Queues)]`: a fieldless enum becomes an
//! application's closed set of queues, each with a name checked at compile
//! time against the envelope's rule and against its siblings.

use std::collections::HashMap;

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Data, DeriveInput, Fields, LitStr};

use crate::names::{name_problem, snake_case};

fn prefix_of(input: &DeriveInput) -> syn::Result<Option<LitStr>> {
    let mut prefix: Option<LitStr> = None;
    for attr in &input.attrs {
        if attr.path().is_ident("queue") {
            return Err(syn::Error::new_spanned(
                attr,
                "`#[queue(...)]` goes on a variant; the enum takes `#[queues(prefix = \"...\")]`",
            ));
        }
        if !attr.path().is_ident("queues") {
            continue;
        }
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("prefix") {
                if prefix.is_some() {
                    return Err(meta.error("`prefix` is given twice"));
                }
                let lit: LitStr = meta.value()?.parse()?;
                if lit.value().ends_with('.') {
                    return Err(syn::Error::new(
                        lit.span(),
                        "leave out the trailing `.`: it is added between prefix and name",
                    ));
                }
                prefix = Some(lit);
                Ok(())
            } else {
                Err(meta.error("unknown key in `#[queues(...)]`; expected `prefix`"))
            }
        })?;
    }
    Ok(prefix)
}

fn variant_name(variant: &syn::Variant) -> syn::Result<Option<LitStr>> {
    let mut name: Option<LitStr> = None;
    for attr in &variant.attrs {
        if attr.path().is_ident("queues") {
            return Err(syn::Error::new_spanned(
                attr,
                "`#[queues(...)]` goes on the enum; a variant takes `#[queue(name = \"...\")]`",
            ));
        }
        if !attr.path().is_ident("queue") {
            continue;
        }
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("name") {
                if name.is_some() {
                    return Err(meta.error("`name` is given twice"));
                }
                name = Some(meta.value()?.parse()?);
                Ok(())
            } else {
                Err(meta.error("unknown key in `#[queue(...)]`; expected `name`"))
            }
        })?;
    }
    Ok(name)
}

/// Expands `#[derive(Queues)]`.
pub(crate) fn derive(input: &DeriveInput) -> syn::Result<TokenStream> {
    let Data::Enum(data) = &input.data else {
        return Err(syn::Error::new(
            input.ident.span(),
            "#[derive(Queues)] goes on a fieldless enum, one variant per queue",
        ));
    };
    if !input.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &input.generics,
            "a queue set cannot be generic",
        ));
    }
    if data.variants.is_empty() {
        return Err(syn::Error::new(
            input.ident.span(),
            "a queue set needs at least one queue",
        ));
    }
    let prefix = prefix_of(input)?.map(|p| p.value());
    let ident = &input.ident;
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut variants = Vec::new();
    let mut names = Vec::new();
    for variant in &data.variants {
        if !matches!(variant.fields, Fields::Unit) {
            return Err(syn::Error::new_spanned(
                &variant.fields,
                "a queue is a plain variant without fields",
            ));
        }
        let explicit = variant_name(variant)?;
        let base = explicit
            .as_ref()
            .map_or_else(|| snake_case(&variant.ident.to_string()), LitStr::value);
        let full = match &prefix {
            Some(prefix) => format!("{prefix}.{base}"),
            None => base,
        };
        if let Some(why) = name_problem(&full) {
            let message = format!(
                "queue name {full:?} {why}; queue names are 1-240 characters of [a-z0-9._-]"
            );
            return Err(match &explicit {
                Some(lit) => syn::Error::new(lit.span(), message),
                None => syn::Error::new(variant.ident.span(), message),
            });
        }
        if let Some(other) = seen.insert(full.clone(), variant.ident.to_string()) {
            return Err(syn::Error::new(
                variant.ident.span(),
                format!("queue name {full:?} is already used by `{other}`"),
            ));
        }
        variants.push(&variant.ident);
        names.push(full);
    }
    Ok(quote! {
        #[automatically_derived]
        impl ::rdq::QueueSet for #ident {
            fn all() -> &'static [Self] {
                &[#(#ident::#variants),*]
            }

            fn name(&self) -> &'static ::core::primitive::str {
                match self {
                    #(#ident::#variants => #names,)*
                }
            }
        }
    })
}
