/*
 * privdrop.c — least privilege for the children (docs/operating.md
 * "Least privilege").
 *
 * The supervisor keeps what needs its own identity: the lock file, the
 * segments (created 0600 and handed to the children's account), the data
 * dir (created and handed over), the listening sockets (bound before any
 * fork, inherited by the session). Each child, between fork and exec,
 * drops to --user: no ambient capabilities, no_new_privs, an empty
 * capability bounding set, supplementary groups, gid, uid (real, effective,
 * saved); then it checks that it
 * cannot get root back. A non-root binary exec'd with all uids non-zero
 * keeps no capabilities (permitted, effective and ambient sets are cleared
 * by the uid change).
 *
 * The account is resolved once, at start (NSS lookups are not safe between
 * fork and exec): --user, else "bigfleet" when the supervisor runs as root
 * and that account exists, else the starting user. Children running as
 * root need --allow-root.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bigfleet/log.h"
#include "supervisor.h"

int bf_priv_resolve(const struct bf_config *cfg, struct bf_priv *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    uid_t me = geteuid();
    const char *name = cfg->user;
    struct passwd *pw = NULL;
    if (me != 0) {
        pw = getpwuid(me);
        if (name[0] && (!pw || strcmp(pw->pw_name, name) != 0)) {
            struct passwd *want = getpwnam(name);
            if (!want || want->pw_uid != me) {
                snprintf(err, errlen,
                         "--user %s: only a supervisor started as root can run the children as "
                         "another account (running as uid %u)",
                         name, (unsigned)me);
                return -EPERM;
            }
            pw = want;
        }
        p->uid = me;
        p->gid = getegid();
        snprintf(p->name, sizeof p->name, "%s", pw ? pw->pw_name : "?");
        p->drop = false;
    } else {
        if (!name[0])
            name = getpwnam(BF_DEFAULT_USER) ? BF_DEFAULT_USER : "root";
        pw = getpwnam(name);
        if (!pw) {
            snprintf(err, errlen, "--user %s: no such account", name);
            return -ENOENT;
        }
        p->uid = pw->pw_uid;
        p->gid = pw->pw_gid;
        snprintf(p->name, sizeof p->name, "%s", pw->pw_name);
        if (p->uid == 0 && !cfg->allow_root) {
            snprintf(err, errlen,
                     "refusing to run the children as root: create the account %s "
                     "(systemd-sysusers deploy/bigfleet.sysusers.conf) or pass --user NAME; "
                     "--allow-root permits root",
                     BF_DEFAULT_USER);
            return -EPERM;
        }
        p->drop = p->uid != 0;
        if (p->drop) {
            p->ngroups = (int)(sizeof p->groups / sizeof p->groups[0]);
            if (getgrouplist(pw->pw_name, pw->pw_gid, p->groups, &p->ngroups) < 0) {
                p->groups[0] = pw->pw_gid; /* more than 64 groups: the primary one only */
                p->ngroups = 1;
            }
        }
    }
    p->seg_gid = p->gid;
    p->seg_mode = 0600;
    if (cfg->inspect_group[0]) {
        struct group *g = getgrnam(cfg->inspect_group);
        if (!g) {
            snprintf(err, errlen, "--inspect-group %s: no such group", cfg->inspect_group);
            return -ENOENT;
        }
        if (me != 0 && g->gr_gid != getegid()) {
            bool member = false;
            gid_t gs[256];
            int n = getgroups(256, gs);
            for (int i = 0; i < n; i++)
                member |= gs[i] == g->gr_gid;
            if (!member) {
                snprintf(err, errlen,
                         "--inspect-group %s: a supervisor not running as root can only use "
                         "one of its own groups",
                         cfg->inspect_group);
                return -EPERM;
            }
        }
        p->seg_gid = g->gr_gid;
        p->seg_mode = 0640;
    }
    return 0;
}

int bf_priv_drop(const struct bf_priv *p)
{
    /* whatever the account: no ambient capabilities survive the exec (a unit
     * may grant the supervisor CAP_NET_BIND_SERVICE), and no exec may gain
     * privileges (setuid binaries, file capabilities) */
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -errno;
    if (!p->drop)
        return 0;
    /* an empty bounding set first (needs CAP_SETPCAP, which root still has) */
    for (int cap = 0; cap < 64; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno == EINVAL)
            break;
    if (setgroups((size_t)p->ngroups, p->groups) != 0)
        return -errno;
    if (setresgid(p->gid, p->gid, p->gid) != 0)
        return -errno;
    if (setresuid(p->uid, p->uid, p->uid) != 0)
        return -errno;
    /* paranoia: root must be out of reach now */
    uid_t r, e, s;
    if (getresuid(&r, &e, &s) != 0 || r != p->uid || e != p->uid || s != p->uid)
        return -EPERM;
    if (setuid(0) == 0 || seteuid(0) == 0)
        return -EPERM;
    return 0;
}

/* Entries of dirfd (and one level below) owned by `from` are handed to the
 * account; symbolic links are never followed (their own owner is left). */
static int hand_over(int dfd, uid_t from, const struct bf_priv *p, int depth)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return -errno;
    }
    int rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        struct stat fs;
        if (fstatat(dirfd(d), de->d_name, &fs, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (S_ISLNK(fs.st_mode) || fs.st_uid != from)
            continue;
        if (fchownat(dirfd(d), de->d_name, p->uid, p->gid, AT_SYMLINK_NOFOLLOW) != 0) {
            rc = -errno;
            break;
        }
        if (S_ISDIR(fs.st_mode) && depth > 0) {
            int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                rc = hand_over(sub, from, p, depth - 1);
        }
    }
    closedir(d);
    return rc;
}

/*
 * The data dir must belong to the children's account (the session keeps the
 * coordinator term there). A dir the supervisor itself owns (it created it,
 * or an earlier run as root did) is handed over with what the supervisor
 * created inside it (the LMDB files, two levels deep); a dir owned by anyone
 * else is an error: never chown a directory we did not make.
 */
int bf_priv_own_dir(const struct bf_priv *p, const char *dir, char *err, size_t errlen)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        int rc = -errno;
        snprintf(err, errlen, "--data-dir %s: %s", dir, strerror(-rc));
        return rc;
    }
    struct stat st;
    if (fstat(dfd, &st) != 0) {
        int rc = -errno;
        close(dfd);
        snprintf(err, errlen, "--data-dir %s: %s", dir, strerror(-rc));
        return rc;
    }
    uid_t me = geteuid();
    if (!p->drop) {
        close(dfd);
        return 0;
    }
    if (st.st_uid != me && st.st_uid != p->uid) {
        close(dfd);
        snprintf(err, errlen,
                 "--data-dir %s is owned by uid %u; the children run as %s (uid %u): give it to "
                 "them (chown) or choose another directory",
                 dir, (unsigned)st.st_uid, p->name, (unsigned)p->uid);
        return -EPERM;
    }
    if (st.st_uid == me && fchown(dfd, p->uid, p->gid) != 0) {
        int rc = -errno;
        close(dfd);
        snprintf(err, errlen, "--data-dir %s: chown: %s", dir, strerror(-rc));
        return rc;
    }
    int rc = hand_over(dfd, me, p, 1);
    if (rc)
        snprintf(err, errlen, "--data-dir %s: chown of its files: %s", dir, strerror(-rc));
    return rc;
}
