# Runs one command of a shell session and saves the session's state for the next one.
# Called as: bash -c "<this script>" bash COMMAND STATE_DIR START_DIR physical|logical
# COMMAND arrives as data ($1) and is only ever given to `eval`, exactly as typed at a prompt.
# Everything here uses `builtin` so that functions the user defines cannot change its meaning.
__agentbox_state=$2
__agentbox_mode=$4
# Variables every fresh bash has (including the inherited environment): not saved.
__agentbox_fresh=$(builtin compgen -v)
if [ -s "$__agentbox_state/env" ]; then
  builtin . "$__agentbox_state/env" 2>/dev/null
fi
__agentbox_oldpwd=${OLDPWD-}
if [ "$__agentbox_mode" = physical ]; then
  # Symlinks in paths are resolved: `cd link; pwd` shows where it really is.
  builtin set -o physical
  builtin cd -P -- "$3" || builtin exit 1
else
  builtin cd -L -- "$3" || builtin exit 1
fi
if [ -n "$__agentbox_oldpwd" ]; then OLDPWD=$__agentbox_oldpwd; fi
builtin unset __agentbox_oldpwd

# Writes the exported environment, the variables and functions the session defined, and the
# working directory, for sandboxd to pick up once the command has finished.
__agentbox_save() {
  builtin set +o errexit +o nounset +o verbose +o noglob
  builtin local IFS=$' \t\n' __agentbox_name
  {
    builtin export -p
    for __agentbox_name in $(builtin compgen -v); do
      case $__agentbox_name in
        __agentbox_* | BASH* | COMP_* | _ | PWD | OLDPWD | FUNCNAME | PIPESTATUS | GROUPS | DIRSTACK | COLUMNS | LINES) continue ;;
      esac
      case $'\n'"$__agentbox_fresh"$'\n' in
        *$'\n'"$__agentbox_name"$'\n'*) continue ;;
      esac
      builtin declare -p -- "$__agentbox_name" 2>/dev/null
    done
    for __agentbox_name in $(builtin compgen -A function); do
      case $__agentbox_name in __agentbox_*) continue ;; esac
      builtin declare -f -- "$__agentbox_name"
    done
  } >"$__agentbox_state/env.next"
  if [ "$__agentbox_mode" = physical ]; then
    builtin pwd -P >"$__agentbox_state/cwd.next"
  else
    builtin pwd -L >"$__agentbox_state/cwd.next"
  fi
}
# `set +x` first, with its own trace silenced, so a command that enabled tracing does not trace
# the saving.
builtin trap '{ __agentbox_status=$?; builtin set +o xtrace; } 2>/dev/null; __agentbox_save; builtin exit "$__agentbox_status"' EXIT
builtin eval "$1"
