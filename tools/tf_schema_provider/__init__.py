"""An offline Terraform provider plugin: the pinned providers' real schemas (hashicorp/google and
google-beta 8.7.0, archive 2.8.1, time 0.14.2, decoded from the cdktn-provider-* wheels) served
under their real addresses and versions, so real `terraform validate` and `terraform test`
(mock_provider) run where no registry can be reached (issue 23).

schema.py decodes a wheel into Terraform's schema shape, install.py builds the plugin directory
for `terraform init -plugin-dir`, server.py is the plugin process.

Library choice: `tf` 1.2 (PyPI, MIT, hfern/tf) over `pyvider` 0.8. Both speak protocol 6 from
Python. `tf` is small (about 2,000 lines: the go-plugin handshake with TLS, the gRPC servicer and
the generated tfplugin6 messages) with four dependencies (grpcio, protobuf < 6, msgpack,
cryptography), and its servicer is a plain class whose schema call can answer with a prebuilt
response, which is all this plugin needs. pyvider is a full framework (attrs-decorated resource
classes, its own cty and rpcplugin packages, provide-foundation for logging and config, protobuf
>= 7.35): much more to install and to keep in step, to serve a schema it would have to rebuild
as Python classes type by type.
"""
