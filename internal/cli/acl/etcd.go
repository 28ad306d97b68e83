package acl

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// GrantEtcd makes user (role of the same name) with readwrite on each
// prefix, as EtcdCommands prints it, through a client that may manage
// users (root, or any client while auth is off). An empty password makes a
// user without one (etcd authenticates it by its client certificate's
// CN). Safe to repeat: an existing role keeps its grants, an existing user
// gets the password.
func GrantEtcd(ctx context.Context, cl *clientv3.Client, user, password string, prefixes ...string) error {
	if user == "" || user == "root" {
		return fmt.Errorf("etcd user %q: empty or reserved", user)
	}
	if _, err := cl.RoleAdd(ctx, user); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("etcd role %s: %w", user, err)
	}
	for _, p := range prefixes {
		if _, err := cl.RoleGrantPermission(ctx, user, p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			return fmt.Errorf("etcd role %s: readwrite on %s: %w", user, p, err)
		}
	}
	if err := addEtcdUser(ctx, cl, user, password); err != nil {
		return err
	}
	if _, err := cl.UserGrantRole(ctx, user, user); err != nil {
		return fmt.Errorf("etcd user %s: grant role: %w", user, err)
	}
	return nil
}

// EnableEtcdAuth makes user root (role root) with password and turns
// authentication on.
func EnableEtcdAuth(ctx context.Context, cl *clientv3.Client, rootPassword string) error {
	if err := addEtcdUser(ctx, cl, "root", rootPassword); err != nil {
		return err
	}
	if _, err := cl.UserGrantRole(ctx, "root", "root"); err != nil {
		return fmt.Errorf("etcd grant root: %w", err)
	}
	if _, err := cl.AuthEnable(ctx); err != nil {
		return fmt.Errorf("etcd auth enable: %w", err)
	}
	return nil
}

// addEtcdUser adds a user, or sets the password of one that exists.
func addEtcdUser(ctx context.Context, cl *clientv3.Client, name, password string) error {
	_, err := cl.UserAddWithOptions(ctx, name, password, &clientv3.UserAddOptions{NoPassword: password == ""})
	if errors.Is(err, rpctypes.ErrUserAlreadyExist) && password != "" {
		_, err = cl.UserChangePassword(ctx, name, password)
	}
	if err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("etcd user %s: %w", name, err)
	}
	return nil
}
