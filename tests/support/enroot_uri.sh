#!/bin/bash
# enroot's own parsing of an image URI, copied from NVIDIA/enroot src/docker.sh (Apache-2.0,
# Copyright (c) 2018-2025, NVIDIA CORPORATION) so tests/slurm/test_render_enroot.py can run the rendered
# pyxis reference through it. Only `common::err` and `creds_file` are supplied here; the rest is verbatim.
#
#   enroot3_parse URI: enroot v3.5.0 (commit c7dc4a6b66e817af5ceb7d5315850696067b3f80), the regular
#     expression of `docker::import` and the defaults `docker::_download` applies to what it parsed;
#   enroot4_parse URI: enroot v4.1.2 (commit bd51f53b6fa954805ae3e1985c5dc7594ff66d05), `docker::_parse_uri`.
#
# Each prints user, registry, image and tag, one per line, or exits 1 with enroot's message.
# shellcheck disable=SC1007  # enroot's own `local a= b=` style, kept verbatim
set -euo pipefail

creds_file=""
common::err() {
    echo "$*" >&2
    exit 1
}

enroot3_parse() {
    local -r uri="$1"
    local image= registry= tag= user=

    # --- v3.5.0 src/docker.sh, docker::import ---
    # Parse the image reference of the form 'docker://[<user>@][<registry>#]<image>[:<tag>]'.
    local -r reg_user="[[:alnum:]_.!~*\'()%\;:\&=+$,-@]+"
    local -r reg_registry="[^#]+"
    local -r reg_image="[[:lower:][:digit:]/._-]+"
    local -r reg_tag="[[:alnum:]._:-]+"

    if [[ "${uri}" =~ ^docker://((${reg_user})@)?((${reg_registry})#)?(${reg_image})(:(${reg_tag}))?$ ]]; then
        user="${BASH_REMATCH[2]}"
        registry="${BASH_REMATCH[4]}"
        image="${BASH_REMATCH[5]}"
        tag="${BASH_REMATCH[7]}"
    else
        common::err "Invalid image reference: ${uri}"
    fi

    # --- v3.5.0 src/docker.sh, docker::_download: the defaults for what was left out ---
    registry="${registry:-registry-1.docker.io}" tag="${tag:-latest}"
    if  [[ "${image}" != */* ]] && [[ "${registry}" =~ docker\.io$ ]]; then
        image="library/${image}"
    fi

    printf "%s\n%s\n%s\n%s\n" "${user}" "${registry}" "${image}" "${tag}"
}

# --- v4.1.2 src/docker.sh, verbatim ---
docker::_parse_uri() {
    local -r uri="$1"
    local -r reg_user="[[:alnum:]_.!~*\'()%\;:\&=+$,-@]+"
    local -r reg_image="[[:lower:][:digit:]/._-]+"
    local -r reg_tag="[[:alnum:]._:-]+"
    local -r reg_digest="sha256:[[:alnum:]]+"
    local user= registry= image= tag=

    # Try Docker standard syntax with registry: docker://[USER@]REGISTRY/IMAGE[@DIGEST|:TAG]
    # Registry must be FQDN (contains ".") or have port (contains ":"), otherwise it's a Docker Hub namespace
    if [[ "${uri}" =~ ^docker://((${reg_user})@)?([^/#]+)/(${reg_image}):(${reg_tag})@(${reg_digest})$ ]]; then
        local match_registry="${BASH_REMATCH[3]}"
        local match_image="${BASH_REMATCH[4]}"
        user="${BASH_REMATCH[2]}"
        # Ignore tag, use digest
        tag="${BASH_REMATCH[6]}"
        if [[ "${match_registry}" =~ \.|: ]]; then
            # docker://[USER@]REGISTRY/IMAGE:TAG@DIGEST
            registry="${match_registry}"
            image="${match_image}"
        else
            # docker://[USER@]NAMESPACE/IMAGE:TAG@DIGEST
            registry="registry-1.docker.io"
            image="${match_registry}/${match_image}"
        fi
    elif [[ "${uri}" =~ ^docker://((${reg_user})@)?([^/#]+)/(${reg_image})@(${reg_digest})$ ]]; then
        local match_registry="${BASH_REMATCH[3]}"
        local match_image="${BASH_REMATCH[4]}"
        user="${BASH_REMATCH[2]}"
        tag="${BASH_REMATCH[5]}"
        if [[ "${match_registry}" =~ \.|: ]]; then
            # docker://[USER@]REGISTRY/IMAGE@DIGEST
            registry="${match_registry}"
            image="${match_image}"
        else
            # docker://[USER@]NAMESPACE/IMAGE@DIGEST
            registry="registry-1.docker.io"
            image="${match_registry}/${match_image}"
        fi
    elif [[ "${uri}" =~ ^docker://((${reg_user})@)?([^/#]+)/(${reg_image})(:(${reg_tag}))?$ ]]; then
        local match_registry="${BASH_REMATCH[3]}"
        local match_image="${BASH_REMATCH[4]}"
        user="${BASH_REMATCH[2]}"
        tag="${BASH_REMATCH[6]}"
        if [[ "${match_registry}" =~ \.|: ]]; then
            # docker://[USER@]REGISTRY/IMAGE[:TAG]
            registry="${match_registry}"
            image="${match_image}"
        else
            # docker://[USER@]NAMESPACE/IMAGE[:TAG]
            registry="registry-1.docker.io"
            image="${match_registry}/${match_image}"
        fi
    elif [[ "${uri}" =~ ^docker://((${reg_user})@)?([^/@#:]+):(${reg_tag})@(${reg_digest})$ ]]; then
        # docker://[USER@]IMAGE:TAG@DIGEST
        user="${BASH_REMATCH[2]}"
        registry="registry-1.docker.io"
        image="library/${BASH_REMATCH[3]}"
        # Ignore tag, use digest
        tag="${BASH_REMATCH[5]}"
    elif [[ "${uri}" =~ ^docker://((${reg_user})@)?([^/@#:]+)@(${reg_digest})$ ]]; then
        # docker://[USER@]IMAGE@DIGEST
        user="${BASH_REMATCH[2]}"
        registry="registry-1.docker.io"
        image="library/${BASH_REMATCH[3]}"
        tag="${BASH_REMATCH[4]}"
    elif [[ "${uri}" =~ ^docker://((${reg_user})@)?([^/@#:]+)(:(${reg_tag}))?$ ]]; then
        # docker://[USER@]IMAGE[:TAG]
        user="${BASH_REMATCH[2]}"
        registry="registry-1.docker.io"
        image="library/${BASH_REMATCH[3]}"
        tag="${BASH_REMATCH[5]}"
    # enroot format with '#' as the separator between registry and image
    elif [[ "${uri}" =~ ^docker://((${reg_user})@)?([^#/@]+)#(${reg_image}):(${reg_tag})@(${reg_digest})$ ]]; then
        # docker://[USER@]REGISTRY#IMAGE:TAG@DIGEST
        user="${BASH_REMATCH[2]}"
        registry="${BASH_REMATCH[3]}"
        image="${BASH_REMATCH[4]}"
        # Ignore tag, use digest
        tag="${BASH_REMATCH[6]}"
    elif [[ "${uri}" =~ ^docker://((${reg_user})@)?([^#/@]+)#(${reg_image})@(${reg_digest})$ ]]; then
        # docker://[USER@]REGISTRY#IMAGE@DIGEST
        user="${BASH_REMATCH[2]}"
        registry="${BASH_REMATCH[3]}"
        image="${BASH_REMATCH[4]}"
        tag="${BASH_REMATCH[5]}"
    elif [[ "${uri}" =~ ^docker://((${reg_user})@)?([^#/@]+)#(${reg_image})(:(${reg_tag}))?$ ]]; then
        # docker://[USER@]REGISTRY#IMAGE[:TAG]
        user="${BASH_REMATCH[2]}"
        registry="${BASH_REMATCH[3]}"
        image="${BASH_REMATCH[4]}"
        tag="${BASH_REMATCH[6]}"
    else
        common::err "Invalid image reference: ${uri}"
    fi

    if [ -z "${tag}" ]; then
        tag="latest"
    fi

    # Try to infer the user from the credential file.
    if [ -s "${creds_file}" ] && [ -n "${registry}" ] && [ -z "${user}" ]; then
        user="$(awk "/^[[:space:]]*machine[[:space:]]+${registry%:*}[[:space:]]+login[[:space:]]+.+/ { print \$4; exit }" "${creds_file}")"
    fi

    printf "%s\n%s\n%s\n%s\n" "${user}" "${registry}" "${image}" "${tag}"
}

enroot4_parse() {
    docker::_parse_uri "$1"
}

"$@"
