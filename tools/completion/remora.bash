# SPDX-License-Identifier: BSD-3-Clause
# bash completion for remora(1). Installed as
# share/bash-completion/completions/remora. Keep in sync with `remora --help`
# and `remora COMMAND --help` (tests/release/test_man_completion.sh checks it).

_remora_client_opts="--token-file --encrypt --timeout --path --lanes --json --help -h"

_remora()
{
    local cur prev words cword
    if declare -F _init_completion >/dev/null; then
        _init_completion || return
    else
        cur=${COMP_WORDS[COMP_CWORD]}
        prev=${COMP_WORDS[COMP_CWORD-1]}
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
    fi

    local commands="serve ls read write ping bench stat info config doctor stream"
    local stream_commands="serve read clone"

    # The command (and the stream subcommand) typed so far.
    local cmd="" sub="" i
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
            -*) ;;
            *)
                if [[ -z $cmd ]]; then
                    cmd=${words[i]}
                elif [[ $cmd == stream && -z $sub ]]; then
                    sub=${words[i]}
                fi
                ;;
        esac
    done

    # Option arguments.
    case $prev in
        --token-file|-o|--output|-i|--input)
            COMPREPLY=($(compgen -f -- "$cur"))
            return ;;
        --path)
            COMPREPLY=($(compgen -W "auto am rma map ipc staging" -- "$cur"))
            return ;;
        --op)
            COMPREPLY=($(compgen -W "read write" -- "$cur"))
            return ;;
        --mode)
            COMPREPLY=($(compgen -W "every latest" -- "$cur"))
            return ;;
        --rate)
            COMPREPLY=($(compgen -W "max" -- "$cur"))
            return ;;
        --source)
            COMPREPLY=($(compgen -W "pattern fixed" -- "$cur") $(compgen -f -- "$cur"))
            return ;;
        --listen|--metrics|--region|--resize|--ring|--offset|--length|--size|--depth|\
        --iters|--seconds|--work-us|--count|-n|--gpu|--lanes|--workers|--timeout|--reconnect-for)
            return ;;
    esac

    if [[ -z $cmd ]]; then
        COMPREPLY=($(compgen -W "$commands --help --version" -- "$cur"))
        return
    fi

    local opts=""
    case $cmd in
        serve)
            opts="--listen --region --writable --token-file --encrypt --resize --gpu --workers --lanes
                  --metrics --json --help -h" ;;
        ls|ping|stat)
            opts="$_remora_client_opts"
            [[ $cmd == ping ]] && opts="$opts -n --count" ;;
        read)
            opts="--offset --length -o --output --verify --gpu $_remora_client_opts" ;;
        write)
            opts="--offset -i --input --pattern --length $_remora_client_opts" ;;
        bench)
            opts="--op --size --depth --iters --seconds --work-us --gpu $_remora_client_opts" ;;
        info|config)
            opts="--json --config --help -h" ;;
        doctor)
            opts="--json --help -h" ;;
        stream)
            case $sub in
                "")
                    COMPREPLY=($(compgen -W "$stream_commands --help" -- "$cur"))
                    return ;;
                serve)
                    opts="--listen --ring --rate --source --token-file --encrypt --gpu --workers --json
                          --help -h" ;;
                read)
                    opts="--mode --count --seconds --warmup --verify --progress --gpu --no-reconnect
                          --reconnect-for $_remora_client_opts" ;;
                clone)
                    opts="$_remora_client_opts"
                    # the second operand is a file
                    [[ $cur != -* ]] && COMPREPLY=($(compgen -f -- "$cur")) && return ;;
            esac ;;
        *)
            return ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    fi
}
complete -F _remora remora
