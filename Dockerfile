# One image for every role: the command picks what runs, e.g. `serve --role scheduler --etcd …`
# (docs/install.md "The container image"). Build arguments:
#   BASE_IMAGE  any image with Node 20, npm and a POSIX shell (default node:20-bookworm-slim)
#   DIST        `build` (default) compiles dist/ from the sources inside the build; `context` takes
#               the dist/src that `npm run build` left in the build context, so the build needs
#               neither the dev dependencies nor the compiler (CI that has built already, offline
#               tests). Either way the runtime stage gets only production dependencies.
ARG BASE_IMAGE=node:20-bookworm-slim

FROM ${BASE_IMAGE} AS production-modules
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: the only install scripts are ssh2's optional native speed-ups (dockerode's SSH
# transport, which the agent does not use) and a notice protobufjs prints.
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && rm -rf /root/.npm

FROM ${BASE_IMAGE} AS dist
WORKDIR /app
ARG DIST=build
COPY package.json package-lock.json tsconfig.json ./
RUN if [ "$DIST" = build ]; then npm ci --ignore-scripts --no-audit --no-fund && rm -rf /root/.npm; \
    elif [ "$DIST" != context ]; then echo "DIST must be build or context, got $DIST" >&2; exit 1; fi
COPY src ./src
# `dis[t]` matches nothing when dist/ is absent, which a DIST=build from a fresh checkout needs.
COPY package.json dis[t] ./prebuilt/
RUN if [ "$DIST" = build ]; then rm -rf dist && npx tsc -p . --sourceMap false && npm run build:web; \
    elif [ -f prebuilt/src/cli.js ] && [ -f prebuilt/src/web/index.html ]; then mkdir dist && mv prebuilt/src dist/src; \
    else echo "DIST=context needs dist/src with the dashboard in the build context: run npm run build first" >&2; exit 1; fi

FROM ${BASE_IMAGE}
WORKDIR /app
ENV NODE_ENV=production PLATFORM_DATA_DIR=/var/lib/platform
COPY --from=production-modules /app/node_modules ./node_modules
COPY --from=dist /app/dist/src ./dist/src
COPY package.json ./
COPY bin ./bin
# gateway 8080, orchestrator 9000, directory 9001, scheduler 9002, agent 9003, web 9004
EXPOSE 8080 8443 9000 9001 9002 9003 9004
ENTRYPOINT ["node", "--max-semi-space-size=4", "bin/platform"]
CMD ["up", "--host", "0.0.0.0"]
