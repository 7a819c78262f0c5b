# Runs one command of a shell session and saves the session's state for the next one.
# Called as: bash -c "<this script>" bash COMMAND STATE_DIR START_DIR physical|logical MARKER [VAR...]
# or, started ahead of time, as: bash -c "<this script>" bash --wait-for-command (or forked by a
# zygote, below) and then handed the same five values on fd 3, each NUL-terminated. MARKER is exported as
# AGENTBOX_SHELL_JOB, so that sandboxd finds every program the command starts (see procs.rs).
# COMMAND arrives as data ($1) and is only ever given to `eval`, exactly as typed at a prompt.
# Everything here uses `builtin` (and `[[`, a keyword) so that functions the user defines cannot
# change its meaning.
#
# Everything that does not depend on the command (parsing the functions below, listing the
# variables of a fresh bash) comes first, so a bash started ahead of time has done it before the
# command arrives.

# Every variable name, without forking (`compgen -v` would need a subshell): each `${!X@}`
# lists the names starting with X.
__agentbox_names() { __agentbox_list=" ${!a@} ${!b@} ${!c@} ${!d@} ${!e@} ${!f@} ${!g@} ${!h@} ${!i@} ${!j@} ${!k@} ${!l@} ${!m@} ${!n@} ${!o@} ${!p@} ${!q@} ${!r@} ${!s@} ${!t@} ${!u@} ${!v@} ${!w@} ${!x@} ${!y@} ${!z@} ${!A@} ${!B@} ${!C@} ${!D@} ${!E@} ${!F@} ${!G@} ${!H@} ${!I@} ${!J@} ${!K@} ${!L@} ${!M@} ${!N@} ${!O@} ${!P@} ${!Q@} ${!R@} ${!S@} ${!T@} ${!U@} ${!V@} ${!W@} ${!X@} ${!Y@} ${!Z@} ${!_@} "; }

# Writes the exported environment, the variables and functions the session defined, and the
# working directory, for sandboxd to pick up once the command has finished. One `declare -p`
# for all the names and one redirection for the whole file: per-name calls, each with its own
# redirection, cost milliseconds.
__agentbox_save() {
  builtin set +o errexit +o nounset +o verbose +o noglob
  builtin local IFS=$' \t\n' __agentbox_name
  builtin local -a __agentbox_keep
  __agentbox_names
  for __agentbox_name in $__agentbox_list; do
    case $__agentbox_name in
      __agentbox_* | BASH* | COMP_* | _ | PWD | OLDPWD | FUNCNAME | PIPESTATUS | GROUPS | DIRSTACK | COLUMNS | LINES) continue ;;
    esac
    [[ -n ${__agentbox_fresh[$__agentbox_name]-} ]] || __agentbox_keep+=("$__agentbox_name")
  done
  # The wrapper's own functions are defined anew by the next command's wrapper. (bash runs a
  # copy of a function's body, so this one may unset itself.)
  builtin unset -f __agentbox_names __agentbox_save __agentbox_done __agentbox_restore
  {
    builtin export -p
    if [[ ${#__agentbox_keep[@]} -gt 0 ]]; then
      builtin declare -p -- "${__agentbox_keep[@]}"
    fi
    builtin declare -f
  } >"$__agentbox_state/env.next" 2>/dev/null
  if [[ $__agentbox_mode = physical ]]; then
    builtin pwd -P >"$__agentbox_state/cwd.next"
  else
    builtin pwd -L >"$__agentbox_state/cwd.next"
  fi
}

# Reports the end of the command to sandboxd, before the slower saving: the marker, the exit
# status and the working directory, each NUL-terminated, on the session's `done` FIFO (opened
# read-write, which never blocks). sandboxd answers from this while the state is being saved.
__agentbox_done() {
  {
    builtin printf '%s\0%s\0' "$__agentbox_marker" "$__agentbox_status"
    if [[ $__agentbox_mode = physical ]]; then builtin pwd -P; else builtin pwd -L; fi
    builtin printf '\0'
  } 1<>"$__agentbox_state/done" 2>/dev/null
}

# Puts back the variables this command had for itself only (see below), as they were before.
__agentbox_restore() {
  builtin local __agentbox_i
  for __agentbox_i in "${!__agentbox_env_names[@]}"; do
    builtin unset -- "${__agentbox_env_names[__agentbox_i]}" 2>/dev/null
    if [[ -n ${__agentbox_env_prev[__agentbox_i]} ]]; then
      builtin eval -- "${__agentbox_env_prev[__agentbox_i]/#declare /declare -g }" 2>/dev/null
    fi
  done
}

# Variables every fresh bash has (including the inherited environment): not saved.
__agentbox_names
builtin declare -A __agentbox_fresh
for __agentbox_name in $__agentbox_list; do __agentbox_fresh[$__agentbox_name]=1; done
builtin unset __agentbox_name __agentbox_list

# A zygote (see zygote.rs), started as: bash -c "<this script>" bash --zygote BUILTIN_SO. It
# reads requests on fd 0, each a directory holding three FIFOs (args, in, out), NUL-terminated,
# and forks (the agentbox_fork builtin) a new bash per request, which opens the FIFOs as its
# fd 3, stdin and stdout/stderr, reports DIR and its pid on fd 1 (each NUL-terminated; DIR and
# "-" if the fork failed), and goes on below as a bash waiting for its command.
if [[ $# -eq 2 && $1 = --zygote ]]; then
  builtin enable -f "$2" agentbox_fork || builtin exit 1
  __agentbox_zygote=$$
  while IFS= builtin read -r -d '' __agentbox_dir; do
    if ! agentbox_fork; then
      builtin printf '%s\0-\0' "$__agentbox_dir"
      continue
    fi
    if [[ $$ != "$__agentbox_zygote" ]]; then
      # Plain `exec`: redirections of `builtin exec` last for that command only. (No function
      # can be named `exec` yet: nothing of the session has been sourced.)
      exec 3<"$__agentbox_dir/args" 0<"$__agentbox_dir/in" 4>"$__agentbox_dir/out" ||
        builtin exit 1
      builtin printf '%s\0%s\0' "$__agentbox_dir" "$$"
      exec 1>&4 2>&4 4>&-
      # Commands do not get the builtin.
      builtin enable -n agentbox_fork
      builtin unset __agentbox_dir __agentbox_zygote
      builtin set -- --wait-for-command
      break
    fi
  done
  # The zygote itself ends when sandboxd closes its fd 0.
  [[ $1 = --wait-for-command ]] || builtin exit 0
fi
if [[ $# -eq 1 && $1 = --wait-for-command ]]; then
  # sandboxd closing fd 3 without a command (it is stopping) ends this bash quietly.
  IFS= builtin read -r -d '' __agentbox_1 <&3 && IFS= builtin read -r -d '' __agentbox_2 <&3 &&
    IFS= builtin read -r -d '' __agentbox_3 <&3 && IFS= builtin read -r -d '' __agentbox_4 <&3 &&
    IFS= builtin read -r -d '' __agentbox_5 <&3 ||
    builtin exit 0
  exec 3<&- # plain `exec`, as above: the command does not inherit the hand-over pipe
  builtin set -- "$__agentbox_1" "$__agentbox_2" "$__agentbox_3" "$__agentbox_4" "$__agentbox_5"
  builtin unset __agentbox_1 __agentbox_2 __agentbox_3 __agentbox_4 __agentbox_5
fi
# SIGINT (the bash API's `kill` with SIGINT, like Ctrl-C) ends the command with status 130, as
# at a prompt; without this trap bash would die of the signal after the exit trap had already
# reported the status of the last command that finished. Set before anything of the session is
# restored and before the exit trap, so an interrupt that arrives while the command is being
# set up ends it with 130 too (and, before the exit trap, leaves the session's state as it was).
builtin trap 'builtin exit 130' INT
__agentbox_state=$2
__agentbox_mode=$4
__agentbox_marker=$5
if [[ -s $__agentbox_state/env ]]; then
  builtin . "$__agentbox_state/env" 2>/dev/null
fi
# After the saved environment, which holds the previous command's marker.
builtin export AGENTBOX_SHELL_JOB="$5"
__agentbox_oldpwd=${OLDPWD-}
if [[ $__agentbox_mode = physical ]]; then
  # Symlinks in paths are resolved: `cd link; pwd` shows where it really is.
  builtin set -o physical
  builtin cd -P -- "$3" || builtin exit 1
else
  builtin cd -L -- "$3" || builtin exit 1
fi
if [[ -n $__agentbox_oldpwd ]]; then OLDPWD=$__agentbox_oldpwd; fi
builtin unset __agentbox_oldpwd

# Variables for this command only (the bash pipe API's `env`): after the five values, each
# VAR is NAME=VALUE (set and export) or NAME (unset); sandboxd checked that every NAME is an
# identifier. The exit trap puts the previous values back before the session is saved.
__agentbox_env_names=() __agentbox_env_prev=()
for __agentbox_e in "${@:6}"; do
  __agentbox_n=${__agentbox_e%%=*}
  __agentbox_env_names+=("$__agentbox_n")
  if [[ -v $__agentbox_n ]]; then
    __agentbox_env_prev+=("$(builtin declare -p -- "$__agentbox_n" 2>/dev/null)")
  else
    __agentbox_env_prev+=("")
  fi
  if [[ $__agentbox_e == *=* ]]; then
    builtin export -- "$__agentbox_n=${__agentbox_e#*=}"
  else
    builtin unset -- "$__agentbox_n"
  fi
done
builtin unset __agentbox_e __agentbox_n

# `set +x` first, with its own trace silenced, so a command that enabled tracing does not trace
# the report and the saving.
builtin trap '{ __agentbox_status=$?; builtin set +o xtrace +o errexit +o nounset; } 2>/dev/null; __agentbox_done; __agentbox_restore; __agentbox_save; builtin exit "$__agentbox_status"' EXIT
builtin eval -- "$1"
